package engine

import (
	"fmt"
	"github.com/arbor-dev/arbor/internal/tree"
	"reflect"
	"slices"
)

// CheckTree checks tree id's invariants (tree.Check), that its metadata on
// disk equals its memory, and that its files layer holds exactly its
// nodes' branches.
func CheckTree(e *Engine, id string) error {
	ts, err := e.get("check", id)
	if err != nil {
		return err
	}
	defer ts.mu.Unlock()
	if err := ts.t.Check(); err != nil {
		return err
	}
	_, nodes, intent, err := e.meta.load(id)
	if err != nil {
		return err
	}
	if intent != nil {
		return fmt.Errorf("commit intent left behind: %+v", intent)
	}
	mem := ts.t.Nodes()
	slices.SortFunc(nodes, func(a, b tree.Node) int { return tree.CompareIDs(a.ID, b.ID) })
	if len(mem) != len(nodes) {
		return fmt.Errorf("memory has %d nodes, disk %d", len(mem), len(nodes))
	}
	for i := range mem {
		a, b := mem[i], nodes[i]
		a.Children, b.Children = nil, nil
		a.DiskBytes, b.DiskBytes = 0, 0 // measured, not saved with every change
		if !reflect.DeepEqual(a, b) && !(a.ID == b.ID && a.State == b.State && a.Parent == b.Parent &&
			a.Protected == b.Protected && a.Gen == b.Gen && a.ForkGen == b.ForkGen &&
			a.CreatedAt.Equal(b.CreatedAt) && a.LastActiveAt.Equal(b.LastActiveAt)) {
			return fmt.Errorf("node %s: memory %+v, disk %+v", a.ID, a, b)
		}
	}
	branches, err := ts.files.Branches()
	if err != nil {
		return err
	}
	var want []string
	for _, n := range mem {
		want = append(want, ts.branch(n.ID))
	}
	slices.Sort(want)
	slices.Sort(branches)
	if !slices.Equal(want, branches) {
		return fmt.Errorf("branches %v, nodes want %v", branches, want)
	}
	return nil
}
