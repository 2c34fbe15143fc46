package tree

import (
	"errors"
	"slices"
	"time"

	"github.com/arbor-dev/arbor/api"
)

// step is one verb a test runs.
type step struct {
	verb   string // fork, rollback, commit, abort, prune, suspend, resume, protect, unprotect, touch, evict
	node   string
	labels int
	cost   Cost
}

var verbs = []string{"fork", "rollback", "commit", "abort", "prune", "suspend", "resume", "protect", "unprotect", "touch", "evict"}

func plan(t *Tree, now time.Time, s step) (*Plan, error) {
	switch s.verb {
	case "fork":
		labels := make([]string, s.labels)
		for i := range labels {
			labels[i] = "l"
		}
		return t.PlanFork(now, s.node, labels, s.cost)
	case "rollback":
		return t.PlanRollback(now, s.node, "back", s.cost)
	case "commit":
		return t.PlanCommit(now, s.node)
	case "abort":
		return t.PlanAbort(now, s.node)
	case "prune":
		return t.PlanPrune(now, s.node)
	case "suspend":
		return t.PlanSuspend(now, s.node)
	case "resume":
		return t.PlanResume(now, s.node)
	case "protect":
		return t.PlanProtect(s.node, true)
	case "unprotect":
		return t.PlanProtect(s.node, false)
	case "touch":
		return t.PlanTouch(now, s.node)
	case "evict":
		return t.PlanAutoEvict(now), nil
	}
	panic("unknown verb " + s.verb)
}

// fataler is what testing.TB and *rapid.T share.
type fataler interface {
	Fatalf(format string, args ...any)
}

var sentinels = []error{api.ErrBadRequest, api.ErrNotFound, api.ErrExists, api.ErrStale, api.ErrBudget,
	api.ErrProtected, api.ErrState, api.ErrBusy, api.ErrNoSpace}

// run plans s on t, checks every statement of doc.go against the tree before
// and after, and applies the plan. It returns the plan (nil on refusal).
func run(tb fataler, t *Tree, now time.Time, s step) (*Plan, error) {
	before := t.Clone()
	p, err := plan(t, now, s)
	if n, ok := before.Node(s.node); ok && s.verb == "commit" && len(n.Children) > 0 {
		// Commit is leaf-only: a node with children is refused (naming
		// them), so no descendant is ever dropped or orphaned by it.
		if err == nil || !(errors.Is(err, api.ErrState) || errors.Is(err, api.ErrStale)) {
			tb.Fatalf("%+v: commit of a node with children %v = %v, want a refusal (bad_state)", s, n.Children, err)
		}
	}
	if err != nil {
		// Refusal: nothing changed, and the error says why in api terms.
		if !equal(before, t) {
			tb.Fatalf("%+v refused (%v) but changed the tree:\nbefore:\n%s\nafter:\n%s", s, err, before, t)
		}
		ok := false
		for _, e := range sentinels {
			ok = ok || errors.Is(err, e)
		}
		if !ok {
			tb.Fatalf("%+v: error %v wraps no api sentinel", s, err)
		}
		if errors.Is(err, api.ErrBudget) {
			checkRefusalJustified(tb, before, s, err)
		}
		return nil, err
	}
	if !equal(before, t) {
		tb.Fatalf("%+v: planning changed the tree", s)
	}
	if err := t.Apply(p); err != nil {
		tb.Fatalf("%+v: apply: %v", s, err)
	}
	checkStep(tb, before, t, s, p)
	return p, nil
}

// equal is reflect.DeepEqual for trees, fast enough to run after every verb
// (TestEqual checks that it agrees).
func equal(a, b *Tree) bool {
	if a.root != b.root || a.budget != b.budget || a.nextID != b.nextID || a.version != b.version ||
		a.usage != b.usage || len(a.nodes) != len(b.nodes) {
		return false
	}
	for id, x := range a.nodes {
		y, ok := b.nodes[id]
		if !ok {
			return false
		}
		if x.ID != y.ID || x.Parent != y.Parent || x.State != y.State || x.Label != y.Label || x.Protected != y.Protected ||
			!x.CreatedAt.Equal(y.CreatedAt) || x.CreatedAt != y.CreatedAt || x.LastActiveAt != y.LastActiveAt ||
			x.RAMBytes != y.RAMBytes || x.DiskBytes != y.DiskBytes || x.Gen != y.Gen || x.ForkGen != y.ForkGen ||
			!slices.Equal(x.Children, y.Children) || (x.Children == nil) != (y.Children == nil) {
			return false
		}
	}
	return true
}

// exempt is the set of nodes the verb uses, which its eviction must not take.
func exempt(s step) map[string]bool {
	switch s.verb {
	case "fork", "rollback", "resume":
		return map[string]bool{s.node: true}
	}
	return map[string]bool{}
}

// lru computes, independently of the package, the eviction candidates of
// before in eviction order.
func lru(before *Tree, ex map[string]bool) []string {
	var c []*Node
	for _, n := range before.nodes {
		if n.State == Live && !n.Protected && !ex[n.ID] {
			c = append(c, n)
		}
	}
	slices.SortFunc(c, func(a, b *Node) int { return CompareIDs(a.ID, b.ID) })
	slices.SortStableFunc(c, func(a, b *Node) int { return a.LastActiveAt.Compare(b.LastActiveAt) })
	ids := make([]string, len(c))
	for i, n := range c {
		ids[i] = n.ID
	}
	return ids
}

// added is what the verb makes live: nodes, RAM, disk.
func added(before *Tree, s step) (int, int64, int64) {
	switch s.verb {
	case "fork":
		return s.labels, int64(s.labels) * s.cost.RAMBytes, int64(s.labels) * s.cost.DiskBytes
	case "rollback":
		return 1, s.cost.RAMBytes, s.cost.DiskBytes
	case "resume":
		n, _ := before.Node(s.node)
		return 1, n.RAMBytes, 0
	}
	return 0, 0, 0
}

// checkRefusalJustified: statement 5, first half: a verb refused for budget
// could not have fitted by suspending every evictable node.
func checkRefusalJustified(tb fataler, before *Tree, s step, err error) {
	u := before.Usage()
	b := before.Budget()
	n, ram, disk := added(before, s)
	var freeN int
	var freeRAM int64
	for _, id := range lru(before, exempt(s)) {
		x, _ := before.Node(id)
		freeN++
		freeRAM += x.RAMBytes
	}
	fitsNodes := u.LiveNodes+n-freeN <= b.MaxLiveNodes
	fitsRAM := u.LiveRAMBytes+ram-freeRAM <= b.MaxLiveRAMBytes
	fitsDisk := u.DiskBytes+disk <= b.MaxDiskBytes
	if fitsNodes && fitsRAM && fitsDisk {
		tb.Fatalf("%+v refused (%v) though suspending %d evictable nodes would fit:\n%s", s, err, freeN, before)
	}
}

// checkStep asserts doc.go's statements for one applied verb.
func checkStep(tb fataler, before, after *Tree, s step, p *Plan) {
	fail := func(format string, args ...any) {
		tb.Fatalf("%+v: "+format+"\nbefore:\n%s\nafter:\n%s", append(append([]any{s}, args...), before, after)...)
	}
	if err := after.Check(); err != nil {
		fail("%v", err)
	}
	// Which nodes left the tree.
	var removed []string
	for id := range before.nodes {
		if _, ok := after.nodes[id]; !ok {
			removed = append(removed, id)
		}
	}
	sortIDs(removed)
	var wantRemoved []string
	switch s.verb {
	case "abort", "prune":
		wantRemoved = before.Subtree(s.node)
		sortIDs(wantRemoved)
	case "commit":
		wantRemoved = []string{s.node}
	}
	// Statement 2: only abort, prune (their named subtree) and commit (the
	// committed child) remove nodes; eviction never does.
	if !slices.Equal(removed, wantRemoved) {
		fail("removed %v, want %v", removed, wantRemoved)
	}
	evicted := map[string]bool{}
	for _, id := range p.Evicted {
		evicted[id] = true
	}
	for _, n := range before.nodes {
		a, ok := after.nodes[n.ID]
		// Statement 1: protected nodes.
		if n.Protected {
			if evicted[n.ID] {
				fail("evicted protected %s", n.ID)
			}
			if !ok && s.verb != "abort" && s.verb != "commit" {
				fail("protected %s removed by %s", n.ID, s.verb)
			}
			if ok && n.State == Live && a.State == Suspended && !(s.verb == "suspend" && s.node == n.ID) {
				fail("protected %s suspended by %s", n.ID, s.verb)
			}
		}
		if !ok {
			// Statement 3: nothing removed while a descendant stays.
			for _, d := range before.Subtree(n.ID) {
				if _, ok := after.nodes[d]; ok {
					fail("removed %s but its descendant %s remains", n.ID, d)
				}
			}
			continue
		}
		// Every live->suspended change is the named suspend or an eviction.
		if n.State == Live && a.State == Suspended && !evicted[n.ID] && !(s.verb == "suspend" && s.node == n.ID) {
			fail("%s suspended without being evicted", n.ID)
		}
		if evicted[n.ID] && (n.State != Live || a.State != Suspended) {
			fail("evicted %s went %s -> %s", n.ID, n.State, a.State)
		}
	}
	// Statement 4: evictions are a prefix of the LRU order of candidates.
	cands := lru(before, exempt(s))
	if len(p.Evicted) > len(cands) || !slices.Equal(p.Evicted, cands[:len(p.Evicted)]) {
		fail("evicted %v, not a prefix of LRU candidates %v", p.Evicted, cands)
	}
	switch s.verb {
	case "fork", "rollback", "resume", "evict":
	default:
		if len(p.Evicted) > 0 {
			fail("%s evicted %v", s.verb, p.Evicted)
		}
	}
	b := after.Budget()
	u := after.Usage()
	thr := Threshold(b.MaxLiveRAMBytes)
	// Statement 5, second half: an accepted verb leaves the tree within budget.
	if u.LiveNodes > b.MaxLiveNodes || (u.LiveRAMBytes > b.MaxLiveRAMBytes && s.verb != "evict") {
		fail("over budget after %s: %+v > %+v", s.verb, u, b)
	}
	// Statement 6: eviction takes no more than it must: without the last
	// evicted node the tree would be over budget or at the 85%% threshold.
	if k := len(p.Evicted); k > 0 {
		last, _ := after.Node(p.Evicted[k-1])
		ln, lr := u.LiveNodes+1, u.LiveRAMBytes+last.RAMBytes
		if ln <= b.MaxLiveNodes && lr <= b.MaxLiveRAMBytes && !(lr > 0 && lr >= thr) {
			fail("evicted %v: the last one was not needed", p.Evicted)
		}
	}
	// Statement 6b: after an eviction pass, RAM at or above the threshold
	// means no evictable node holding RAM remains.
	if s.verb == "fork" || s.verb == "rollback" || s.verb == "resume" || s.verb == "evict" {
		if u.LiveRAMBytes > 0 && u.LiveRAMBytes >= thr {
			ex := exempt(s)
			for _, id := range p.Created {
				ex[id] = true
			}
			for _, id := range lru(after, ex) {
				if n, _ := after.Node(id); n.RAMBytes > 0 {
					fail("RAM %d >= threshold %d but %s (RAM %d) still evictable", u.LiveRAMBytes, thr, id, n.RAMBytes)
				}
			}
		}
	}
	// Verb-specific statements.
	switch s.verb {
	case "fork", "rollback":
		want := s.labels
		if s.verb == "rollback" {
			want = 1
		}
		src, _ := after.Node(s.node)
		if len(p.Created) != want {
			fail("created %v, want %d", p.Created, want)
		}
		for _, id := range p.Created {
			c, ok := after.Node(id)
			if !ok || c.Parent != s.node || c.State != Live || c.ForkGen != src.Gen || !slices.Contains(src.Children, id) {
				fail("child %s: %+v", id, c)
			}
		}
	case "commit":
		c, _ := before.Node(s.node)
		pb, _ := before.Node(c.Parent)
		pa, _ := after.Node(c.Parent)
		if pa.Gen != pb.Gen+1 || pa.State != pb.State {
			fail("parent %s gen %d->%d state %s->%s", pa.ID, pb.Gen, pa.Gen, pb.State, pa.State)
		}
		// Exactly the siblings from the same fork point, and their
		// subtrees, became stale.
		var wantStale []string
		for _, sib := range pb.Children {
			sn, _ := before.Node(sib)
			if sib == s.node || sn.State == Stale || sn.ForkGen != c.ForkGen {
				continue
			}
			for _, x := range before.Subtree(sib) {
				if xn, _ := before.Node(x); xn.State != Stale {
					wantStale = append(wantStale, x)
				}
			}
		}
		sortIDs(wantStale)
		if !slices.Equal(p.Stale, wantStale) {
			fail("stale %v, want %v", p.Stale, wantStale)
		}
		for _, id := range wantStale {
			if n, _ := after.Node(id); n.State != Stale {
				fail("%s not stale", id)
			}
		}
	}
	// Nodes the verb did not name, create, evict or make stale keep their
	// state and protection.
	touched := map[string]bool{s.node: true}
	for _, id := range p.Stale {
		touched[id] = true
	}
	for _, n := range before.nodes {
		a, ok := after.nodes[n.ID]
		if !ok || touched[n.ID] || evicted[n.ID] {
			continue
		}
		if a.State != n.State || a.Protected != n.Protected {
			fail("untouched %s changed %s/%v -> %s/%v", n.ID, n.State, n.Protected, a.State, a.Protected)
		}
	}
}
