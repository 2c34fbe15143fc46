package engine

import (
	"context"
	"fmt"

	"github.com/arbor-dev/arbor/internal/tree"
)

// CheckBackend checks that tree id's backend agrees with the tree: every
// live node is held live, no suspended node runs, and the backend holds no
// node the tree lacks or holds stale.
func CheckBackend(e *Engine, id string) error {
	ts, err := e.get("check", id)
	if err != nil {
		return err
	}
	defer ts.mu.Unlock()
	held, err := ts.backend.Nodes(context.Background())
	if err != nil {
		return err
	}
	have := map[string]HeldState{}
	for _, h := range held {
		have[h.ID] = h.State
		n, ok := ts.t.Node(h.ID)
		switch {
		case !ok:
			return fmt.Errorf("backend holds %s (%s), which the tree lacks", h.ID, h.State)
		case n.State == tree.Stale:
			return fmt.Errorf("backend holds stale node %s (%s)", h.ID, h.State)
		case n.State == tree.Suspended && h.State == HeldLive:
			return fmt.Errorf("suspended node %s runs in the backend", h.ID)
		}
	}
	for _, n := range ts.t.Nodes() {
		if n.State == tree.Live && have[n.ID] != HeldLive {
			return fmt.Errorf("live node %s is held %q by the backend", n.ID, have[n.ID])
		}
	}
	return nil
}

// LeasesOn is the number of execs in flight on node of tree id.
func LeasesOn(e *Engine, id, node string) int {
	ts, err := e.get("leases", id)
	if err != nil {
		return -1
	}
	defer ts.mu.Unlock()
	return ts.leasesOn(node)
}
