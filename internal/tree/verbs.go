package tree

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/arbor-dev/arbor/api"
)

// Plan is the whole effect of one verb, computed without changing the tree:
// the nodes it creates or changes (their new values) and the nodes it removes.
// The engine writes a Plan to its store in one transaction and then Applies it;
// a Plan is valid only for the tree version it was made from.
type Plan struct {
	Verb    string   // fork, rollback, commit, abort, prune, suspend, resume, protect, unprotect, touch, evict
	Node    string   // the node the verb names ("" for evict)
	Put     []Node   // nodes created or changed, with their new values, in the order the verb touched them
	Delete  []string // nodes removed, in id order
	Created []string // new nodes (fork, rollback), in label order
	Evicted []string // live nodes the verb suspends to fit the budget, in eviction order
	Stale   []string // nodes the verb makes stale (commit), in id order
	NextID  uint64   // the tree's next id number after the verb
	// Parent is the node a commit went into ("" for other verbs).
	Parent string

	version uint64
}

// Apply makes p's effects. p must come from this tree's Plan methods with no
// Apply or SetUsage in between; otherwise Apply fails wrapping api.ErrInternal
// and changes nothing.
func (t *Tree) Apply(p *Plan) error {
	if p == nil || p.version != t.version {
		return api.Errorf(api.ErrInternal, "apply: plan is not for this tree version")
	}
	for i := range p.Put {
		c := p.Put[i] // shares Children with the plan: nobody changes a Children slice in place
		if old, ok := t.nodes[c.ID]; ok {
			account(&t.usage, old, -1)
		}
		account(&t.usage, &c, 1)
		t.nodes[c.ID] = &c
	}
	for _, id := range p.Delete {
		if old, ok := t.nodes[id]; ok {
			account(&t.usage, old, -1)
			delete(t.nodes, id)
		}
	}
	t.nextID = p.NextID
	t.version++
	return nil
}

// draft is a verb in progress: copies of the nodes it changes over the tree.
type draft struct {
	t     *Tree
	put   map[string]*Node
	order []string // ids in put, in the order first touched
	// evicted holds the nodes evict suspended, outside put: evict is the
	// last step of every draft, so nothing views them afterwards.
	evicted []Node
	del     map[string]bool
	nextID  uint64
	plan    Plan
}

func (t *Tree) draft(verb, node string) *draft {
	return &draft{t: t, put: map[string]*Node{}, del: map[string]bool{}, nextID: t.nextID,
		plan: Plan{Verb: verb, Node: node, version: t.version}}
}

// view is the node as the draft sees it (nil if absent); do not modify it.
func (d *draft) view(id string) *Node {
	if d.del[id] {
		return nil
	}
	if n, ok := d.put[id]; ok {
		return n
	}
	return d.t.nodes[id]
}

// edit returns the draft's own copy of node id, which must exist. The copy
// shares its Children slice with the tree: replace it, never change it in
// place.
func (d *draft) edit(id string) *Node {
	if n, ok := d.put[id]; ok {
		return n
	}
	n := new(Node)
	*n = *d.t.nodes[id]
	d.put[id] = n
	d.order = append(d.order, id)
	return n
}

// removeChild returns children without id, in a new slice.
func removeChild(children []string, id string) []string {
	out := make([]string, 0, len(children))
	for _, c := range children {
		if c != id {
			out = append(out, c)
		}
	}
	return out
}

func (d *draft) create(n *Node) {
	d.put[n.ID] = n
	d.order = append(d.order, n.ID)
	d.plan.Created = append(d.plan.Created, n.ID)
}

func (d *draft) remove(id string) {
	delete(d.put, id)
	d.del[id] = true
}

func (d *draft) newID() string {
	id := fmt.Sprintf("n%d", d.nextID)
	d.nextID++
	return id
}

// subtree is id and its descendants as the draft sees them.
func (d *draft) subtree(id string) []string {
	var out []string
	stack := []string{id}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n := d.view(x)
		if n == nil {
			continue
		}
		out = append(out, x)
		stack = append(stack, n.Children...)
	}
	return out
}

// usage is the tree's usage with the draft's changes: O(changes).
func (d *draft) usage() api.Usage {
	u := d.t.usage
	for id, n := range d.put {
		if old, ok := d.t.nodes[id]; ok {
			account(&u, old, -1)
		}
		account(&u, n, 1)
	}
	for id := range d.del {
		if old, ok := d.t.nodes[id]; ok {
			account(&u, old, -1)
		}
	}
	return u
}

func (d *draft) finish() *Plan {
	p := d.plan
	if len(d.put) == 0 {
		p.Put = d.evicted // an eviction pass alone: no copy of thousands of nodes
	} else {
		p.Put = make([]Node, 0, len(d.put)+len(d.evicted))
		for _, id := range d.order {
			if n, ok := d.put[id]; ok {
				p.Put = append(p.Put, *n)
			}
		}
		p.Put = append(p.Put, d.evicted...)
	}
	for id := range d.del {
		if _, ok := d.t.nodes[id]; ok {
			p.Delete = append(p.Delete, id)
		}
	}
	sortIDs(p.Delete)
	sortIDs(p.Stale)
	p.NextID = d.nextID
	return &p
}

func touch(n *Node, now time.Time) {
	if now.After(n.LastActiveAt) {
		n.LastActiveAt = now
	}
}

// lookup finds a node for a verb, wrapping api.ErrNotFound if it is absent
// and api.ErrStale if it is stale and the verb needs a non-stale node.
func (t *Tree) lookup(verb, id string, allowStale bool) (*Node, error) {
	n, ok := t.nodes[id]
	if !ok {
		return nil, api.Errorf(api.ErrNotFound, "%s %q: no such node", verb, id)
	}
	if n.State == Stale && !allowStale {
		return nil, api.Errorf(api.ErrStale, "%s %s: the node is stale (a sibling committed first); only abort and prune apply", verb, id)
	}
	return n, nil
}

// Threshold is the live RAM from which eviction suspends nodes proactively:
// 85% of max.
func Threshold(maxRAM int64) int64 { return maxRAM/100*85 + maxRAM%100*85/100 }

// candidates are the live, unprotected nodes the draft may suspend, least
// recently active first (ties by id).
func (d *draft) candidates(exempt map[string]bool) []*Node {
	type cand struct {
		at int64
		k  idKey
		n  *Node
	}
	var c []cand
	for id := range d.t.nodes {
		n := d.view(id)
		if n == nil || n.State != Live || n.Protected || exempt[id] {
			continue
		}
		c = append(c, cand{at: n.LastActiveAt.UnixNano(), k: keyOf(id), n: n})
	}
	slices.SortFunc(c, func(a, b cand) int {
		if a.at != b.at {
			if a.at < b.at {
				return -1
			}
			return 1
		}
		return compareKeys(a.k, b.k)
	})
	out := make([]*Node, len(c))
	for i := range c {
		out[i] = c[i].n
	}
	return out
}

// evict suspends candidates until the draft fits the budget, then continues
// while live RAM is at or above Threshold. If refuse is set and the draft
// cannot fit, it returns an api.ErrBudget error that shows the arithmetic
// (before is the usage before the verb, what names the verb).
func (d *draft) evict(exempt map[string]bool, refuse bool, what string, before api.Usage) error {
	b := d.t.budget
	u := d.usage()
	thr := Threshold(b.MaxLiveRAMBytes)
	over := func() bool { return u.LiveNodes > b.MaxLiveNodes || u.LiveRAMBytes > b.MaxLiveRAMBytes }
	pressure := func() bool { return u.LiveRAMBytes > 0 && u.LiveRAMBytes >= thr }
	if !over() && !pressure() {
		return nil
	}
	cands := d.candidates(exempt)
	d.evicted = make([]Node, 0, min(len(cands), max(u.LiveNodes-b.MaxLiveNodes, 0)+4))
	var freeNodes int
	var freeRAM int64
	for _, n := range cands {
		freeNodes++
		freeRAM += n.RAMBytes
	}
	if refuse && (u.LiveNodes-freeNodes > b.MaxLiveNodes || u.LiveRAMBytes-freeRAM > b.MaxLiveRAMBytes) {
		return d.budgetError(what, before, u, freeNodes, freeRAM, exempt)
	}
	i := 0
	suspend := func() {
		d.evicted = append(d.evicted, *cands[i])
		n := &d.evicted[len(d.evicted)-1]
		n.State = Suspended
		u.LiveNodes--
		u.LiveRAMBytes -= n.RAMBytes
		freeRAM -= n.RAMBytes
		d.plan.Evicted = append(d.plan.Evicted, n.ID)
		i++
	}
	for over() && i < len(cands) {
		suspend()
	}
	for pressure() && i < len(cands) && freeRAM > 0 {
		suspend()
	}
	return nil
}

func (d *draft) budgetError(what string, before, after api.Usage, freeNodes int, freeRAM int64, exempt map[string]bool) error {
	b := d.t.budget
	var parts []string
	if after.LiveNodes-freeNodes > b.MaxLiveNodes {
		parts = append(parts, fmt.Sprintf("live nodes %d+%d > max %d", before.LiveNodes, after.LiveNodes-before.LiveNodes, b.MaxLiveNodes))
	}
	if after.LiveRAMBytes-freeRAM > b.MaxLiveRAMBytes {
		parts = append(parts, fmt.Sprintf("live RAM %d+%d > max %d bytes", before.LiveRAMBytes, after.LiveRAMBytes-before.LiveRAMBytes, b.MaxLiveRAMBytes))
	}
	var protected, inUse int
	for id, n := range d.t.nodes {
		if n.State != Live {
			continue
		}
		switch {
		case exempt[id]:
			inUse++
		case n.Protected:
			protected++
		}
	}
	return api.Errorf(api.ErrBudget, "%s: %s; evictable %d (%d bytes of RAM; %d live protected, %d in use)",
		what, strings.Join(parts, ", "), freeNodes, freeRAM, protected, inUse)
}

func checkCost(verb string, c Cost) error {
	if c.RAMBytes < 0 || c.DiskBytes < 0 {
		return api.Errorf(api.ErrBadRequest, "%s: negative cost %+v", verb, c)
	}
	return nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, one)
	}
	return fmt.Sprintf("%d %s", n, many)
}

// PlanFork plans len(labels) new live children of source, each forked from
// source's current state and expected to hold each. source may be live or
// suspended (it keeps its state). Live nodes are evicted to make room; the
// source and the new children are never among them. Errors wrap
// api.ErrNotFound, api.ErrStale, api.ErrBadRequest (no labels) or
// api.ErrBudget.
func (t *Tree) PlanFork(now time.Time, source string, labels []string, each Cost) (*Plan, error) {
	return t.planFork("fork", now, source, labels, each)
}

// PlanRollback plans one new live child of an older node: a fork that
// destroys nothing. Errors as PlanFork.
func (t *Tree) PlanRollback(now time.Time, node, label string, each Cost) (*Plan, error) {
	return t.planFork("rollback", now, node, []string{label}, each)
}

func (t *Tree) planFork(verb string, now time.Time, source string, labels []string, each Cost) (*Plan, error) {
	src, err := t.lookup(verb, source, false)
	if err != nil {
		return nil, err
	}
	if len(labels) == 0 {
		return nil, api.Errorf(api.ErrBadRequest, "%s %s: no labels", verb, source)
	}
	if err := checkCost(verb, each); err != nil {
		return nil, err
	}
	what := fmt.Sprintf("%s %s from %s", verb, plural(len(labels), "child", "children"), source)
	before := t.Usage()
	b := t.budget
	addDisk := each.DiskBytes * int64(len(labels))
	if addDisk/int64(len(labels)) != each.DiskBytes || (b.MaxDiskBytes > 0 && before.DiskBytes+addDisk > b.MaxDiskBytes) || before.DiskBytes+addDisk < 0 {
		return nil, api.Errorf(api.ErrBudget, "%s: disk %d+%d > max %d bytes; eviction frees no disk", what, before.DiskBytes, addDisk, b.MaxDiskBytes)
	}
	if len(labels) > b.MaxLiveNodes {
		return nil, api.Errorf(api.ErrBudget, "%s: live nodes %d+%d > max %d; no eviction can fit %d new nodes", what, before.LiveNodes, len(labels), b.MaxLiveNodes, len(labels))
	}
	d := t.draft(verb, source)
	s := d.edit(src.ID)
	touch(s, now)
	exempt := map[string]bool{src.ID: true}
	for _, l := range labels {
		c := &Node{ID: d.newID(), Parent: src.ID, State: Live, Label: l, CreatedAt: now, LastActiveAt: now,
			RAMBytes: each.RAMBytes, DiskBytes: each.DiskBytes, ForkGen: src.Gen}
		d.create(c)
		s.Children = append(slices.Clip(s.Children), c.ID)
		exempt[c.ID] = true
	}
	if err := d.evict(exempt, true, what, before); err != nil {
		return nil, err
	}
	return d.finish(), nil
}

// PlanCommit plans committing child into its parent: the parent takes the
// child's state (its generation goes up), the child leaves the tree, and
// every sibling forked from the same point becomes stale with its subtree.
// extraStale names further nodes the files layer reported stale; they and
// their subtrees become stale too (the root and the parent's ancestry are
// never made stale). The child must be a leaf: commit or abort its children
// first. Errors wrap api.ErrNotFound, api.ErrStale (the child or parent is
// stale, or the parent moved past the child's fork point) or api.ErrState
// (the root, or a child with children).
func (t *Tree) PlanCommit(now time.Time, child string, extraStale ...string) (*Plan, error) {
	c, err := t.lookup("commit", child, false)
	if err != nil {
		return nil, err
	}
	if c.Parent == "" {
		return nil, api.Errorf(api.ErrState, "commit %s: the root has no parent to commit into", child)
	}
	if len(c.Children) > 0 {
		return nil, api.Errorf(api.ErrState, "commit %s: it has children %s; commit or abort them first", child, strings.Join(c.Children, ", "))
	}
	p := t.nodes[c.Parent]
	if p.State == Stale {
		return nil, api.Errorf(api.ErrStale, "commit %s: parent %s is stale", child, p.ID)
	}
	if c.ForkGen != p.Gen {
		return nil, api.Errorf(api.ErrStale, "commit %s: parent %s changed since the fork (generation %d, forked at %d)", child, p.ID, p.Gen, c.ForkGen)
	}
	d := t.draft("commit", child)
	d.plan.Parent = p.ID
	pp := d.edit(p.ID)
	pp.Gen++
	touch(pp, now)
	pp.Children = removeChild(pp.Children, child)
	d.remove(child)
	stale := func(id string) {
		for _, x := range d.subtree(id) {
			if n := d.view(x); n != nil && n.State != Stale {
				d.edit(x).State = Stale
				d.plan.Stale = append(d.plan.Stale, x)
			}
		}
	}
	for _, s := range pp.Children {
		if n := d.view(s); n.State != Stale && n.ForkGen == c.ForkGen {
			stale(s)
		}
	}
	protectedAncestry := map[string]bool{}
	for x := p.ID; x != ""; x = t.nodes[x].Parent {
		protectedAncestry[x] = true
	}
	for _, x := range extraStale {
		if d.view(x) != nil && !protectedAncestry[x] {
			stale(x)
		}
	}
	return d.finish(), nil
}

// PlanAbort plans removing node and its whole subtree, protected or not: an
// abort names what it drops. The root cannot be aborted (drop the tree).
// Errors wrap api.ErrNotFound or api.ErrState.
func (t *Tree) PlanAbort(now time.Time, node string) (*Plan, error) {
	return t.planDelete("abort", node, false)
}

// PlanPrune plans removing node and its whole subtree; it is refused,
// wrapping api.ErrProtected and naming the node, if node or any descendant
// is protected. Errors also wrap api.ErrNotFound or api.ErrState (the root).
func (t *Tree) PlanPrune(now time.Time, node string) (*Plan, error) {
	return t.planDelete("prune", node, true)
}

func (t *Tree) planDelete(verb, node string, refuseProtected bool) (*Plan, error) {
	n, err := t.lookup(verb, node, true)
	if err != nil {
		return nil, err
	}
	if n.Parent == "" {
		return nil, api.Errorf(api.ErrState, "%s %s: the root cannot be removed; drop the tree instead", verb, node)
	}
	sub := t.Subtree(node)
	if refuseProtected {
		for _, x := range sub {
			if t.nodes[x].Protected {
				if x == node {
					return nil, api.Errorf(api.ErrProtected, "%s %s: the node is protected; unprotect it first", verb, node)
				}
				return nil, api.Errorf(api.ErrProtected, "%s %s: descendant %s is protected; unprotect it first", verb, node, x)
			}
		}
	}
	d := t.draft(verb, node)
	p := d.edit(n.Parent)
	p.Children = removeChild(p.Children, node)
	for _, x := range sub {
		d.remove(x)
	}
	return d.finish(), nil
}

// PlanSuspend plans suspending a live node (protected or not: the caller
// named it). Errors wrap api.ErrNotFound, api.ErrStale or api.ErrState (not
// live).
func (t *Tree) PlanSuspend(now time.Time, node string) (*Plan, error) {
	n, err := t.lookup("suspend", node, false)
	if err != nil {
		return nil, err
	}
	if n.State != Live {
		return nil, api.Errorf(api.ErrState, "suspend %s: the node is %s, not live", node, n.State)
	}
	d := t.draft("suspend", node)
	d.edit(node).State = Suspended
	return d.finish(), nil
}

// PlanResume plans making a suspended node live again, evicting others (never
// this one) to fit. Errors wrap api.ErrNotFound, api.ErrStale, api.ErrState
// (not suspended) or api.ErrBudget.
func (t *Tree) PlanResume(now time.Time, node string) (*Plan, error) {
	n, err := t.lookup("resume", node, false)
	if err != nil {
		return nil, err
	}
	if n.State != Suspended {
		return nil, api.Errorf(api.ErrState, "resume %s: the node is %s, not suspended", node, n.State)
	}
	before := t.Usage()
	d := t.draft("resume", node)
	x := d.edit(node)
	x.State = Live
	touch(x, now)
	if err := d.evict(map[string]bool{node: true}, true, "resume "+node, before); err != nil {
		return nil, err
	}
	return d.finish(), nil
}

// PlanProtect plans setting (on) or clearing node's protection; it is
// idempotent. A stale node cannot be protected (only abort and prune apply
// to it), but it can be unprotected, so that a node protected before it went
// stale can still be pruned. Errors wrap api.ErrNotFound or api.ErrState.
func (t *Tree) PlanProtect(node string, on bool) (*Plan, error) {
	verb := "protect"
	if !on {
		verb = "unprotect"
	}
	n, err := t.lookup(verb, node, true)
	if err != nil {
		return nil, err
	}
	if on && n.State == Stale {
		return nil, api.Errorf(api.ErrState, "protect %s: the node is stale (a sibling committed first); only abort, prune and unprotect apply", node)
	}
	d := t.draft(verb, node)
	d.edit(node).Protected = on
	return d.finish(), nil
}

// PlanTouch plans recording activity on node at now (the LRU key). Errors
// wrap api.ErrNotFound or api.ErrStale.
func (t *Tree) PlanTouch(now time.Time, node string) (*Plan, error) {
	if _, err := t.lookup("touch", node, false); err != nil {
		return nil, err
	}
	d := t.draft("touch", node)
	touch(d.edit(node), now)
	return d.finish(), nil
}

// PlanAutoEvict plans an eviction pass now: suspend least recently active
// unprotected live nodes while the tree is over a budget or its live RAM is
// at or above Threshold. It is never refused; if protected nodes alone
// exceed the budget it suspends every candidate and stops.
func (t *Tree) PlanAutoEvict(now time.Time) *Plan {
	d := t.draft("evict", "")
	_ = d.evict(nil, false, "evict", t.Usage())
	return d.finish()
}
