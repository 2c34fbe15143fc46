package engine_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/enginetest"
)

func soakDuration() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("ARBOR_TEST_SOAK")); err == nil && d > 0 {
		return d
	}
	return 2 * time.Second
}

// randomVerb builds a random request on tree id: mostly on one of the 16
// newest node ids below maxID, sometimes on any.
func randomVerb(r *rand.Rand, id string, maxID int) api.Request {
	k := 1 + r.IntN(maxID)
	if r.IntN(4) != 0 {
		k = max(1, maxID-r.IntN(16))
	}
	node := fmt.Sprintf("n%d", k)
	switch r.IntN(12) {
	case 0, 1:
		return api.Request{Op: api.OpTreeFork, TreeID: id, SourceID: node, Label: "f"}
	case 2:
		return api.Request{Op: api.OpTreeForkBatch, TreeID: id, SourceID: node, Labels: make([]string, 1+r.IntN(3))}
	case 3, 4:
		return api.Request{Op: api.OpTreeCommit, TreeID: id, NodeID: node}
	case 5:
		return api.Request{Op: api.OpTreeAbort, TreeID: id, NodeID: node}
	case 6:
		return api.Request{Op: api.OpTreePrune, TreeID: id, NodeID: node}
	case 7:
		return api.Request{Op: api.OpTreeProtect, TreeID: id, NodeID: node}
	case 8:
		return api.Request{Op: api.OpTreeUnprotect, TreeID: id, NodeID: node}
	case 9:
		return api.Request{Op: api.OpTreeSuspend, TreeID: id, NodeID: node}
	case 10:
		return api.Request{Op: api.OpTreeResume, TreeID: id, NodeID: node}
	}
	if r.IntN(8) != 0 {
		return api.Request{Op: api.OpTreeRollback, TreeID: id, NodeID: node, Label: "r"}
	}
	return api.Request{Op: api.OpTreeAutoEvict, TreeID: id}
}

// TestSoak: 32 goroutines issue random verbs on one tree (ARBOR_TEST_SOAK,
// default 2s); every error is an expected api error, a watcher replaying the
// events never sees a protected node evicted, and the tree's invariants,
// metadata and files agree at the end.
func TestSoak(t *testing.T) {
	e, err := engine.New(engine.Config{Home: t.TempDir(), OpenFiles: enginetest.OpenDirFiles, WatchBuffer: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	do(t, e, api.Request{Op: api.OpTreeCreate, Base: newBase(t), TreeID: "s", Budget: &api.Budget{MaxLiveNodes: 6}})
	wctx, stopWatch := context.WithCancel(context.Background())
	_, events, err := e.Watch(wctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	var watchErr error
	var nEvents int
	var watchWG sync.WaitGroup
	watchWG.Go(func() {
		protected := map[string]bool{}
		var last uint64
		for ev := range events {
			nEvents++
			if last != 0 && ev.Seq != last+1 && watchErr == nil {
				watchErr = fmt.Errorf("event seq %d after %d", ev.Seq, last)
			}
			last = ev.Seq
			switch ev.Kind {
			case "protect":
				protected[ev.NodeID] = true
			case "unprotect", "abort", "prune", "commit":
				delete(protected, ev.NodeID)
			case "evict":
				if protected[ev.NodeID] && watchErr == nil {
					watchErr = fmt.Errorf("protected %s evicted (event %d)", ev.NodeID, ev.Seq)
				}
			}
		}
	})
	var maxID atomic.Int64
	maxID.Store(1)
	deadline := time.Now().Add(soakDuration())
	var ops, oks atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 42))
			for time.Now().Before(deadline) {
				req := randomVerb(r, "s", int(maxID.Load()))
				resp, err := e.Do(context.Background(), req)
				ops.Add(1)
				if err != nil {
					if errors.Is(err, api.ErrInternal) || api.Code(err) == api.CodeInternal {
						t.Errorf("%+v: %v", req, err)
						return
					}
					continue
				}
				oks.Add(1)
				for _, f := range resp.Forks {
					var k int64
					fmt.Sscanf(f.NodeID, "n%d", &k)
					for {
						cur := maxID.Load()
						if k <= cur || maxID.CompareAndSwap(cur, k) {
							break
						}
					}
				}
			}
		})
	}
	wg.Wait()
	if err := engine.CheckTree(e, "s"); err != nil {
		t.Fatal(err)
	}
	stopWatch()
	watchWG.Wait()
	if watchErr != nil {
		t.Fatal(watchErr)
	}
	n := do(t, e, api.Request{Op: api.OpTreeNodes, TreeID: "s"})
	t.Logf("%d verbs (%d accepted), %d events, %d nodes at the end, usage %+v", ops.Load(), oks.Load(), nEvents, len(n.Nodes), *n.Usage)
	if oks.Load() < 50 {
		t.Fatalf("only %d verbs accepted: the soak did not exercise the tree", oks.Load())
	}
}
