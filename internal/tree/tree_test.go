package tree

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"pgregory.net/rapid"
)

var t0 = time.Unix(1_700_000_000, 0)

// shapes returns every rooted tree shape of exactly k nodes, up to
// isomorphism, as parent arrays (parent[0] = -1, parent[i] < i).
func shapes(k int) [][]int {
	seen := map[string]bool{}
	var out [][]int
	par := make([]int, k)
	par[0] = -1
	var canon func(p []int, i int) string
	canon = func(p []int, i int) string {
		var kids []string
		for j := range p {
			if p[j] == i {
				kids = append(kids, canon(p, j))
			}
		}
		slices.Sort(kids)
		return "(" + strings.Join(kids, "") + ")"
	}
	var rec func(i int)
	rec = func(i int) {
		if i == k {
			c := canon(par, 0)
			if !seen[c] {
				seen[c] = true
				out = append(out, slices.Clone(par))
			}
			return
		}
		for p := 0; p < i; p++ {
			par[i] = p
			rec(i + 1)
		}
	}
	rec(1)
	return out
}

// stateSets returns every assignment of states to a shape that the verbs can
// reach: the root is live or suspended, a stale node's descendants are stale.
func stateSets(par []int) [][]State {
	var out [][]State
	st := make([]State, len(par))
	var rec func(i int)
	rec = func(i int) {
		if i == len(par) {
			out = append(out, slices.Clone(st))
			return
		}
		opts := []State{Live, Suspended, Stale}
		if i == 0 {
			opts = opts[:2]
		} else if st[par[i]] == Stale {
			opts = opts[2:]
		}
		for _, s := range opts {
			st[i] = s
			rec(i + 1)
		}
	}
	rec(0)
	return out
}

var perm = []int{3, 0, 5, 1, 6, 2, 4, 7, 9, 8}

// build makes the tree of one exhaustive case. variant picks the activity
// order (distinct times or all ties), the RAM model and the budget slack, so
// that across cases every combination occurs.
func build(tb testing.TB, par []int, st []State, prot int, variant int) (*Tree, Cost) {
	k := len(par)
	nodes := make([]Node, k)
	live := 0
	ramModel := variant % 3 // 0: files-only (no RAM), 1: RAM with a tight budget, 2: RAM with room
	var ram int64
	if ramModel != 0 {
		ram = 10
	}
	for i := range nodes {
		n := Node{ID: "n" + strconv.Itoa(i+1), State: st[i], Protected: prot&(1<<i) != 0,
			CreatedAt: t0, LastActiveAt: t0, RAMBytes: ram, Gen: 1, ForkGen: 1}
		if i > 0 {
			n.Parent = nodes[par[i]].ID
		}
		if st[i] == Stale {
			n.ForkGen = 0
		}
		if (variant/3)%2 == 0 {
			n.LastActiveAt = t0.Add(time.Duration(perm[i]) * time.Second)
		}
		if st[i] == Live {
			live++
		}
		nodes[i] = n
	}
	b := api.Budget{MaxLiveNodes: max(1, live+(variant/6)%3)}
	switch ramModel {
	case 1:
		b.MaxLiveRAMBytes = int64(live)*10 + 5
	case 2:
		b.MaxLiveRAMBytes = 1000
	}
	tr, dropped, err := Restore(b, "n1", uint64(k+1), nodes)
	if err != nil || len(dropped) > 0 {
		tb.Fatalf("restore: %v %v", err, dropped)
	}
	if err := tr.Check(); err != nil {
		tb.Fatalf("built tree: %v\n%s", err, tr)
	}
	return tr, Cost{RAMBytes: ram}
}

func exhaustiveN() int {
	if s := os.Getenv("ARBOR_TREE_EXHAUSTIVE"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	if raceEnabled {
		return 4
	}
	return 5
}

// TestExhaustive runs every verb on every node of every tree shape of up to N
// nodes (ARBOR_TREE_EXHAUSTIVE, default 5; 4 under -race), in every reachable
// combination of states and every subset of protected nodes, and checks the
// statements of doc.go after each.
func TestExhaustive(t *testing.T) {
	n := exhaustiveN()
	var steps, refused, cases atomic.Int64
	start := time.Now()
	for k := 1; k <= n; k++ {
		for si, par := range shapes(k) {
			t.Run(fmt.Sprintf("k%d/shape%d", k, si), func(t *testing.T) {
				t.Parallel()
				for sti, st := range stateSets(par) {
					for prot := 0; prot < 1<<k; prot++ {
						variant := sti*7 + prot*3 + si
						base, cost := build(t, par, st, prot, variant)
						cases.Add(1)
						now := t0.Add(time.Minute)
						try := func(s step) {
							tr := base.Clone()
							steps.Add(1)
							if _, err := run(t, tr, now, s); err != nil {
								refused.Add(1)
							}
						}
						for i := 1; i <= k; i++ {
							id := "n" + strconv.Itoa(i)
							for _, v := range verbs {
								if v == "evict" {
									continue
								}
								try(step{verb: v, node: id, labels: 1, cost: cost})
								if v == "fork" {
									try(step{verb: v, node: id, labels: 2, cost: cost})
								}
							}
						}
						try(step{verb: "evict"})
						try(step{verb: "fork", node: "n99", labels: 1})
						try(step{verb: "fork", node: "n1", labels: 0})
					}
				}
			})
		}
	}
	t.Cleanup(func() {
		t.Logf("N=%d: %d cases, %d verbs (%d refused), %v", n, cases.Load(), steps.Load(), refused.Load(), time.Since(start))
	})
}

// TestRapid drives one tree through random sequences of hundreds of verbs
// under random budgets and costs, with a clock that sometimes stands still,
// checking the statements of doc.go after every verb.
func TestRapid(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		b := api.Budget{
			MaxLiveNodes:    rapid.IntRange(1, 10).Draw(rt, "maxLive"),
			MaxLiveRAMBytes: rapid.Int64Range(1, 300).Draw(rt, "maxRAM"),
			MaxDiskBytes:    rapid.Int64Range(1, 2000).Draw(rt, "maxDisk"),
		}
		cost := Cost{RAMBytes: rapid.Int64Range(0, 40).Draw(rt, "ram"), DiskBytes: rapid.Int64Range(0, 30).Draw(rt, "disk")}
		if cost.RAMBytes > b.MaxLiveRAMBytes {
			cost.RAMBytes = b.MaxLiveRAMBytes
		}
		now := t0
		tr, err := New(b, now)
		if err != nil {
			rt.Fatal(err)
		}
		n := rapid.IntRange(100, 1000).Draw(rt, "steps")
		for i := 0; i < n; i++ {
			now = now.Add(time.Duration(rapid.IntRange(0, 2).Draw(rt, "dt")) * time.Second)
			ids := make([]string, 0, tr.Len()+1)
			for _, x := range tr.Nodes() {
				ids = append(ids, x.ID)
			}
			ids = append(ids, "n0")
			s := step{
				verb:   rapid.SampledFrom(verbs).Draw(rt, "verb"),
				node:   rapid.SampledFrom(ids).Draw(rt, "node"),
				labels: rapid.IntRange(1, 4).Draw(rt, "labels"),
				cost:   cost,
			}
			run(rt, tr, now, s)
		}
	})
}

func TestBudgetMessage(t *testing.T) {
	tr, _ := New(api.Budget{MaxLiveNodes: 8}, t0)
	var kids []string
	for i := 0; i < 6; i++ {
		p, err := run(t, tr, t0.Add(time.Duration(i)*time.Second), step{verb: "fork", node: "n1", labels: 1})
		if err != nil {
			t.Fatal(err)
		}
		kids = append(kids, p.Created...)
	}
	for _, k := range kids[:5] {
		if _, err := run(t, tr, t0, step{verb: "protect", node: k}); err != nil {
			t.Fatal(err)
		}
	}
	// 7 live (root + 6), 5 protected, root in use: 1 evictable.
	_, err := run(t, tr, t0.Add(time.Hour), step{verb: "fork", node: "n1", labels: 3})
	if !errors.Is(err, api.ErrBudget) {
		t.Fatalf("err = %v, want budget", err)
	}
	want := "fork 3 children from n1: live nodes 7+3 > max 8; evictable 1"
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("message %q, want prefix %q", err, want)
	}
	// Two fit by evicting the one evictable node, the least recently active.
	p, err := run(t, tr, t0.Add(time.Hour), step{verb: "fork", node: "n1", labels: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Evicted, []string{kids[5]}) {
		t.Fatalf("evicted %v, want %v", p.Evicted, kids[5:])
	}
}

func TestCommitStalesSiblings(t *testing.T) {
	tr, _ := New(api.Budget{}, t0)
	p, _ := run(t, tr, t0, step{verb: "fork", node: "n1", labels: 3})
	a, b, c := p.Created[0], p.Created[1], p.Created[2]
	p, _ = run(t, tr, t0, step{verb: "fork", node: b, labels: 1})
	grand := p.Created[0]
	p, err := run(t, tr, t0, step{verb: "commit", node: a})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{b, c, grand}; !slices.Equal(p.Stale, want) {
		t.Fatalf("stale %v, want %v", p.Stale, want)
	}
	// The losers cannot commit any more; a fresh fork of the parent can.
	if _, err := run(t, tr, t0, step{verb: "commit", node: c}); !errors.Is(err, api.ErrStale) {
		t.Fatalf("commit of stale sibling: %v", err)
	}
	p, _ = run(t, tr, t0, step{verb: "fork", node: "n1", labels: 1})
	if _, err := run(t, tr, t0, step{verb: "commit", node: p.Created[0]}); err != nil {
		t.Fatalf("commit of fresh fork: %v", err)
	}
}

func TestPruneRefusesProtected(t *testing.T) {
	tr, _ := New(api.Budget{}, t0)
	p, _ := run(t, tr, t0, step{verb: "fork", node: "n1", labels: 1})
	mid := p.Created[0]
	p, _ = run(t, tr, t0, step{verb: "fork", node: mid, labels: 1})
	leaf := p.Created[0]
	run(t, tr, t0, step{verb: "protect", node: leaf})
	_, err := run(t, tr, t0, step{verb: "prune", node: mid})
	if !errors.Is(err, api.ErrProtected) || !strings.Contains(err.Error(), "descendant "+leaf+" is protected") {
		t.Fatalf("prune: %v", err)
	}
	if _, err := run(t, tr, t0, step{verb: "abort", node: mid}); err != nil {
		t.Fatalf("abort names what it drops: %v", err)
	}
}

func TestApplyStalePlan(t *testing.T) {
	tr, _ := New(api.Budget{}, t0)
	p1, _ := tr.PlanFork(t0, "n1", []string{"a"}, Cost{})
	p2, _ := tr.PlanFork(t0, "n1", []string{"b"}, Cost{})
	if err := tr.Apply(p1); err != nil {
		t.Fatal(err)
	}
	before := tr.Clone()
	if err := tr.Apply(p2); !errors.Is(err, api.ErrInternal) {
		t.Fatalf("second plan applied: %v", err)
	}
	if tr.String() != before.String() {
		t.Fatal("refused apply changed the tree")
	}
}

func TestRestoreDropsOrphans(t *testing.T) {
	nodes := []Node{
		{ID: "n1", State: Live},
		{ID: "n2", Parent: "n1", State: Live},
		{ID: "n4", Parent: "n3", State: Live}, // n3 is gone
		{ID: "n5", Parent: "n4", State: Suspended},
	}
	tr, dropped, err := Restore(api.Budget{}, "n1", 3, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dropped, []string{"n4", "n5"}) || tr.Len() != 2 || tr.NextID() != 6 {
		t.Fatalf("dropped %v len %d next %d", dropped, tr.Len(), tr.NextID())
	}
	if err := tr.Check(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Restore(api.Budget{}, "n9", 1, nodes); !errors.Is(err, api.ErrInternal) {
		t.Fatalf("missing root: %v", err)
	}
}

// BenchmarkAutoEvict plans an eviction pass on a tree of 10,000 live nodes
// whose budget allows 8: the worst case, every node but 8 is suspended.
func BenchmarkAutoEvict(b *testing.B) {
	tr, _ := New(api.Budget{MaxLiveNodes: 10_001}, t0)
	ids := []string{"n1"}
	for i := 1; i < 10_000; i++ {
		src := ids[(i*7919)%len(ids)]
		p, err := tr.PlanFork(t0.Add(time.Duration(i*7%10_000)*time.Millisecond), src, []string{"x"}, Cost{})
		if err != nil {
			b.Fatal(err)
		}
		if err := tr.Apply(p); err != nil {
			b.Fatal(err)
		}
		ids = append(ids, p.Created...)
	}
	tr.budget.MaxLiveNodes = 8
	b.ResetTimer()
	for b.Loop() {
		p := tr.PlanAutoEvict(t0)
		if len(p.Evicted) != 10_000-8 {
			b.Fatalf("evicted %d", len(p.Evicted))
		}
	}
}

// BenchmarkForkOnLargeTree is one fork on a tree of 10,000 nodes.
func BenchmarkForkOnLargeTree(b *testing.B) {
	tr, _ := New(api.Budget{MaxLiveNodes: 20_000}, t0)
	for i := 1; i < 10_000; i++ {
		p, _ := tr.PlanFork(t0, "n1", []string{"x"}, Cost{})
		tr.Apply(p)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := tr.PlanFork(t0, "n2", []string{"a"}, Cost{}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestEqual(t *testing.T) {
	a, _ := New(api.Budget{}, t0)
	p, _ := a.PlanFork(t0, "n1", []string{"x", "y"}, Cost{})
	a.Apply(p)
	b := a.Clone()
	if !equal(a, b) || !reflect.DeepEqual(a, b) {
		t.Fatal("clone differs")
	}
	for _, mut := range []func(*Tree){
		func(x *Tree) { x.nodes["n2"].Label = "z" },
		func(x *Tree) { x.nodes["n1"].Children = x.nodes["n1"].Children[:1] },
		func(x *Tree) { x.nextID++ },
		func(x *Tree) { delete(x.nodes, "n3") },
		func(x *Tree) { x.nodes["n3"].LastActiveAt = t0.Add(1) },
	} {
		c := a.Clone()
		mut(c)
		if equal(a, c) || reflect.DeepEqual(a, c) {
			t.Fatalf("mutation not seen")
		}
	}
}

// TestDiskBudgetMessage: a fork that the measured disk usage leaves no room
// for is refused with the arithmetic and changes nothing; with room it fits.
func TestDiskBudgetMessage(t *testing.T) {
	tr, _ := New(api.Budget{MaxDiskBytes: 1_000_000}, t0)
	p, err := tr.PlanFork(t0, "n1", []string{"child"}, Cost{DiskBytes: 8192})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Apply(p); err != nil {
		t.Fatal(err)
	}
	child := p.Created[0]
	if err := tr.SetUsage(child, 0, 995_328); err != nil {
		t.Fatal(err)
	}
	before := tr.Clone()
	_, err = tr.PlanFork(t0, child, []string{"again"}, Cost{DiskBytes: 8192})
	want := "fork 1 child from " + child + ": disk 995328+8192 > max 1000000 bytes; eviction frees no disk"
	if !errors.Is(err, api.ErrBudget) || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("fork of a full tree: %v, want %q", err, want)
	}
	if !equal(before, tr) {
		t.Fatal("a refused fork changed the tree")
	}
	if err := tr.SetUsage(child, 0, 991_808); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.PlanFork(t0, child, []string{"again"}, Cost{DiskBytes: 8192}); err != nil {
		t.Fatalf("a fork that fits exactly: %v", err)
	}
}

// TestStaleRefusesProtect: a stale node cannot be protected (only abort and
// prune apply), but one protected before it went stale can be unprotected
// and then pruned.
func TestStaleRefusesProtect(t *testing.T) {
	tr, _ := New(api.Budget{}, t0)
	p, _ := run(t, tr, t0, step{verb: "fork", node: "n1", labels: 3})
	a, b, c := p.Created[0], p.Created[1], p.Created[2]
	run(t, tr, t0, step{verb: "protect", node: c})
	if _, err := run(t, tr, t0, step{verb: "commit", node: a}); err != nil {
		t.Fatal(err)
	}
	if n, _ := tr.Node(b); n.State != Stale {
		t.Fatalf("%s is %s, want stale", b, n.State)
	}
	_, err := run(t, tr, t0, step{verb: "protect", node: b})
	if !errors.Is(err, api.ErrState) || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("protect of a stale node: %v, want ErrState naming stale", err)
	}
	if n, _ := tr.Node(b); n.Protected {
		t.Fatal("the refused protect protected the node")
	}
	// Protected before it went stale: unprotect applies, then prune.
	if _, err := run(t, tr, t0, step{verb: "prune", node: c}); !errors.Is(err, api.ErrProtected) {
		t.Fatalf("prune of a protected stale node: %v", err)
	}
	if _, err := run(t, tr, t0, step{verb: "unprotect", node: c}); err != nil {
		t.Fatalf("unprotect of a stale node: %v", err)
	}
	if _, err := run(t, tr, t0, step{verb: "prune", node: c}); err != nil {
		t.Fatalf("prune after unprotect: %v", err)
	}
}

// TestNormalizeNodeLimits: a node's RAM defaults to the tree's and may not
// exceed it; its pids default to DefaultBudget's and are at least
// api.MinNodePids.
func TestNormalizeNodeLimits(t *testing.T) {
	for _, tc := range []struct {
		in, want api.Budget
		bad      bool
	}{
		{in: api.Budget{}, want: api.Budget{MaxLiveNodes: 8, MaxLiveRAMBytes: 8 << 30, MaxNodeRAMBytes: 8 << 30, MaxNodePids: 4096}},
		{in: api.Budget{MaxLiveRAMBytes: 1 << 30, MaxNodeRAMBytes: 1 << 20, MaxNodePids: 16},
			want: api.Budget{MaxLiveNodes: 8, MaxLiveRAMBytes: 1 << 30, MaxNodeRAMBytes: 1 << 20, MaxNodePids: 16}},
		{in: api.Budget{MaxLiveRAMBytes: 1 << 20, MaxNodeRAMBytes: 1<<20 + 1}, bad: true},
		{in: api.Budget{MaxNodePids: api.MinNodePids - 1}, bad: true},
		{in: api.Budget{MaxNodePids: -1}, bad: true},
		{in: api.Budget{MaxNodeRAMBytes: -1}, bad: true},
	} {
		got, err := NormalizeBudget(tc.in)
		switch {
		case tc.bad && !errors.Is(err, api.ErrBadRequest):
			t.Errorf("NormalizeBudget(%+v) = %+v, %v; want bad_request", tc.in, got, err)
		case !tc.bad && (err != nil || got != tc.want):
			t.Errorf("NormalizeBudget(%+v) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}
