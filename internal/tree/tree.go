package tree

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/arbor-dev/arbor/api"
)

// State is a node's state: Live, Suspended or Stale.
type State string

// The node states, spelled as on the wire.
const (
	Live      State = api.StateLive
	Suspended State = api.StateSuspended
	Stale     State = api.StateStale
)

// Node is one state of an environment.
type Node struct {
	ID           string    `json:"id"`
	Parent       string    `json:"parent,omitempty"`
	Children     []string  `json:"children,omitempty"` // in creation order
	State        State     `json:"state"`
	Label        string    `json:"label,omitempty"`
	Protected    bool      `json:"protected,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	LastActiveAt time.Time `json:"last_active_at"`
	// RAMBytes is what the node holds while live; it counts towards the
	// tree's live RAM only in state Live.
	RAMBytes  int64 `json:"ram_bytes,omitempty"`
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	// Gen counts the commits made into this node.
	Gen uint64 `json:"gen,omitempty"`
	// ForkGen is the parent's Gen when this node was forked: its fork point.
	ForkGen uint64 `json:"fork_gen,omitempty"`
}

func (n *Node) clone() *Node {
	c := *n
	c.Children = slices.Clone(n.Children)
	return &c
}

// Cost is what one new live node is expected to hold.
type Cost struct {
	RAMBytes  int64
	DiskBytes int64
}

// Tree is one snapshot tree's bookkeeping. It is not safe for concurrent use;
// its owner (the engine) serialises access.
type Tree struct {
	root    string
	budget  api.Budget
	nodes   map[string]*Node
	nextID  uint64    // the number of the next node id
	version uint64    // bumped by every Apply; a Plan is valid only for its version
	usage   api.Usage // kept up to date by every change; Check recomputes it
}

// account adds (sign 1) or removes (sign -1) n's contribution to u.
func account(u *api.Usage, n *Node, sign int) {
	u.TotalNodes += sign
	u.DiskBytes += int64(sign) * n.DiskBytes
	if n.State == Live {
		u.LiveNodes += sign
		u.LiveRAMBytes += int64(sign) * n.RAMBytes
	}
}

// NormalizeBudget fills the zero fields of b from api.DefaultBudget. It fails
// wrapping api.ErrBadRequest on a negative field.
func NormalizeBudget(b api.Budget) (api.Budget, error) {
	if b.MaxLiveNodes < 0 || b.MaxLiveRAMBytes < 0 || b.MaxDiskBytes < 0 || b.MaxNodeRAMBytes < 0 || b.MaxNodePids < 0 {
		return b, api.Errorf(api.ErrBadRequest, "budget %+v: negative limit", b)
	}
	if b.MaxLiveNodes == 0 {
		b.MaxLiveNodes = api.DefaultBudget.MaxLiveNodes
	}
	if b.MaxLiveRAMBytes == 0 {
		b.MaxLiveRAMBytes = api.DefaultBudget.MaxLiveRAMBytes
	}
	if b.MaxDiskBytes == 0 {
		b.MaxDiskBytes = api.DefaultBudget.MaxDiskBytes // none: 0 stays "no limit"
	}
	switch {
	case b.MaxNodeRAMBytes == 0:
		b.MaxNodeRAMBytes = b.MaxLiveRAMBytes
	case b.MaxNodeRAMBytes > b.MaxLiveRAMBytes:
		return b, api.Errorf(api.ErrBadRequest, "budget: max_node_ram_bytes %d is over max_live_ram_bytes %d (one node cannot hold more than the tree)", b.MaxNodeRAMBytes, b.MaxLiveRAMBytes)
	}
	switch {
	case b.MaxNodePids == 0:
		b.MaxNodePids = api.DefaultBudget.MaxNodePids
	case b.MaxNodePids < api.MinNodePids:
		return b, api.Errorf(api.ErrBadRequest, "budget: max_node_pids %d is under %d (a sandbox's own init counts)", b.MaxNodePids, api.MinNodePids)
	}
	return b, nil
}

// New returns a tree holding one live root node, "n1", created at now.
func New(budget api.Budget, now time.Time) (*Tree, error) {
	b, err := NormalizeBudget(budget)
	if err != nil {
		return nil, err
	}
	t := &Tree{budget: b, nodes: map[string]*Node{}, nextID: 1}
	root := &Node{ID: t.newID(), State: Live, CreatedAt: now, LastActiveAt: now}
	t.root = root.ID
	t.nodes[root.ID] = root
	account(&t.usage, root, 1)
	return t, nil
}

// Restore rebuilds a tree from stored nodes. Children lists are rebuilt from
// the Parent fields (in id order); nodes that cannot be reached from the root
// (their parent is missing) are left out and returned in dropped. nextID is
// raised past every node id seen. It fails wrapping api.ErrInternal if root is
// not among nodes or is not a root.
func Restore(budget api.Budget, root string, nextID uint64, nodes []Node) (t *Tree, dropped []string, err error) {
	b, err := NormalizeBudget(budget)
	if err != nil {
		return nil, nil, err
	}
	t = &Tree{root: root, budget: b, nodes: make(map[string]*Node, len(nodes)), nextID: max(nextID, 1)}
	all := make(map[string]*Node, len(nodes))
	for i := range nodes {
		n := nodes[i].clone()
		n.Children = nil
		all[n.ID] = n
		if k, ok := idNumber(n.ID); ok && k >= t.nextID {
			t.nextID = k + 1
		}
	}
	r, ok := all[root]
	if !ok || r.Parent != "" {
		return nil, nil, api.Errorf(api.ErrInternal, "restore: root %q missing", root)
	}
	kids := map[string][]string{}
	for id, n := range all {
		if n.Parent != "" {
			kids[n.Parent] = append(kids[n.Parent], id)
		}
	}
	// Walk from the root: whatever the walk does not reach is dropped.
	stack := []string{root}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n := all[id]
		t.nodes[id] = n
		account(&t.usage, n, 1)
		c := kids[id]
		sortIDs(c)
		n.Children = c
		stack = append(stack, c...)
	}
	for id := range all {
		if _, ok := t.nodes[id]; !ok {
			dropped = append(dropped, id)
		}
	}
	sortIDs(dropped)
	return t, dropped, nil
}

func (t *Tree) newID() string {
	id := "n" + strconv.FormatUint(t.nextID, 10)
	t.nextID++
	return id
}

// idNumber parses "n<k>".
func idNumber(id string) (uint64, bool) {
	if !strings.HasPrefix(id, "n") {
		return 0, false
	}
	k, err := strconv.ParseUint(id[1:], 10, 64)
	return k, err == nil
}

// CompareIDs orders node ids by creation: "n2" < "n10"; ids not of the
// engine's form sort after, by string.
func CompareIDs(a, b string) int {
	ka, oka := idNumber(a)
	kb, okb := idNumber(b)
	switch {
	case oka && okb:
		if ka != kb {
			if ka < kb {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	case oka:
		return -1
	case okb:
		return 1
	}
	return strings.Compare(a, b)
}

// idKey is a node id parsed once for sorting.
type idKey struct {
	num uint64
	odd bool // not of the form n<k>: sorts after, by string
	s   string
}

func keyOf(id string) idKey {
	k, ok := idNumber(id)
	return idKey{num: k, odd: !ok, s: id}
}

func compareKeys(a, b idKey) int {
	if a.odd != b.odd {
		if a.odd {
			return 1
		}
		return -1
	}
	if a.num != b.num {
		if a.num < b.num {
			return -1
		}
		return 1
	}
	return strings.Compare(a.s, b.s)
}

// sortIDs sorts ids by CompareIDs, parsing each once.
func sortIDs(ids []string) {
	if len(ids) < 2 {
		return
	}
	keys := make([]idKey, len(ids))
	for i, id := range ids {
		keys[i] = keyOf(id)
	}
	slices.SortFunc(keys, compareKeys)
	for i := range keys {
		ids[i] = keys[i].s
	}
}

// Root is the root node's id.
func (t *Tree) Root() string { return t.root }

// Budget is the tree's budget, with defaults filled in.
func (t *Tree) Budget() api.Budget { return t.budget }

// NextID is the number the next node id will carry (persisted by the engine).
func (t *Tree) NextID() uint64 { return t.nextID }

// Len is the number of nodes.
func (t *Tree) Len() int { return len(t.nodes) }

// Node returns a copy of node id.
func (t *Tree) Node(id string) (Node, bool) {
	n, ok := t.nodes[id]
	if !ok {
		return Node{}, false
	}
	return *n.clone(), true
}

// Nodes returns a copy of every node, in id order.
func (t *Tree) Nodes() []Node {
	out := make([]Node, 0, len(t.nodes))
	for _, n := range t.nodes {
		out = append(out, *n.clone())
	}
	sortNodes(out)
	return out
}

func sortNodes(ns []Node) {
	keys := make([]struct {
		k idKey
		i int
	}, len(ns))
	for i := range ns {
		keys[i].k, keys[i].i = keyOf(ns[i].ID), i
	}
	slices.SortFunc(keys, func(a, b struct {
		k idKey
		i int
	}) int {
		return compareKeys(a.k, b.k)
	})
	sorted := make([]Node, len(ns))
	for j, k := range keys {
		sorted[j] = ns[k.i]
	}
	copy(ns, sorted)
}

// Subtree returns id and its descendants, id first, then in id order.
func (t *Tree) Subtree(id string) []string {
	if _, ok := t.nodes[id]; !ok {
		return nil
	}
	var out []string
	stack := []string{id}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		out = append(out, x)
		stack = append(stack, t.nodes[x].Children...)
	}
	sortIDs(out[1:])
	return out
}

// Clone returns a deep copy.
func (t *Tree) Clone() *Tree {
	c := *t
	c.nodes = make(map[string]*Node, len(t.nodes))
	for id, n := range t.nodes {
		c.nodes[id] = n.clone()
	}
	return &c
}

// Usage sums what the tree holds.
func (t *Tree) Usage() api.Usage { return t.usage }

func (t *Tree) sumUsage() api.Usage {
	var u api.Usage
	for _, n := range t.nodes {
		account(&u, n, 1)
	}
	return u
}

// CountByState counts nodes in each state.
func (t *Tree) CountByState() map[State]int {
	m := map[State]int{Live: 0, Suspended: 0, Stale: 0}
	for _, n := range t.nodes {
		m[n.State]++
	}
	return m
}

// SetUsage records what node id measurably holds (RAM while live, disk). It
// is bookkeeping of a measurement, so it is never refused for budget; the
// next eviction pass acts on it.
func (t *Tree) SetUsage(id string, ramBytes, diskBytes int64) error {
	n, ok := t.nodes[id]
	if !ok {
		return api.Errorf(api.ErrNotFound, "node %q", id)
	}
	if ramBytes < 0 || diskBytes < 0 {
		return api.Errorf(api.ErrBadRequest, "usage of %s: negative", id)
	}
	account(&t.usage, n, -1)
	n.RAMBytes, n.DiskBytes = ramBytes, diskBytes
	account(&t.usage, n, 1)
	t.version++
	return nil
}

// Check verifies the structural invariants the verbs keep (doc.go lists
// them). It returns nil or an error wrapping api.ErrInternal.
func (t *Tree) Check() error {
	fail := func(format string, args ...any) error {
		return api.Errorf(api.ErrInternal, "tree invariant: "+format, args...)
	}
	r, ok := t.nodes[t.root]
	if !ok {
		return fail("root %q missing", t.root)
	}
	if r.Parent != "" {
		return fail("root %s has parent %s", r.ID, r.Parent)
	}
	if r.State == Stale {
		return fail("root %s is stale", r.ID)
	}
	seen := map[string]bool{}
	stack := []string{t.root}
	for len(stack) > 0 {
		id := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[id] {
			return fail("node %s reached twice", id)
		}
		seen[id] = true
		n, ok := t.nodes[id]
		if !ok {
			return fail("child %s missing", id)
		}
		if n.ID != id {
			return fail("node keyed %s has id %s", id, n.ID)
		}
		if k, ok := idNumber(id); !ok || k >= t.nextID {
			return fail("node id %s not below next id n%d", id, t.nextID)
		}
		switch n.State {
		case Live, Suspended, Stale:
		default:
			return fail("node %s has state %q", id, n.State)
		}
		if n.RAMBytes < 0 || n.DiskBytes < 0 {
			return fail("node %s has negative usage", id)
		}
		if !slices.IsSortedFunc(n.Children, CompareIDs) {
			return fail("node %s children %v out of order", id, n.Children)
		}
		for _, c := range n.Children {
			cn, ok := t.nodes[c]
			if !ok {
				return fail("child %s of %s missing", c, id)
			}
			if cn.Parent != id {
				return fail("child %s of %s names parent %q", c, id, cn.Parent)
			}
			if n.State == Stale && cn.State != Stale {
				return fail("node %s is %s under stale %s", c, cn.State, id)
			}
			if cn.State != Stale && cn.ForkGen != n.Gen {
				return fail("node %s is %s with fork point %d but parent %s is at %d", c, cn.State, cn.ForkGen, id, n.Gen)
			}
		}
		stack = append(stack, n.Children...)
	}
	if len(seen) != len(t.nodes) {
		return fail("%d nodes, %d reachable from the root", len(t.nodes), len(seen))
	}
	u := t.sumUsage()
	if u != t.usage {
		return fail("usage %+v, recorded %+v", u, t.usage)
	}
	if u.LiveNodes > t.budget.MaxLiveNodes {
		return fail("live nodes %d > max %d", u.LiveNodes, t.budget.MaxLiveNodes)
	}
	return nil
}

// String renders the tree for test failures: one node a line, indented.
func (t *Tree) String() string {
	var b strings.Builder
	var walk func(id string, depth int)
	walk = func(id string, depth int) {
		n := t.nodes[id]
		if n == nil {
			fmt.Fprintf(&b, "%s%s (missing)\n", strings.Repeat("  ", depth), id)
			return
		}
		p := ""
		if n.Protected {
			p = " protected"
		}
		fmt.Fprintf(&b, "%s%s %s%s gen=%d fork=%d active=%d ram=%d\n", strings.Repeat("  ", depth), id, n.State, p,
			n.Gen, n.ForkGen, n.LastActiveAt.UnixNano(), n.RAMBytes)
		for _, c := range n.Children {
			walk(c, depth+1)
		}
	}
	walk(t.root, 0)
	return b.String()
}
