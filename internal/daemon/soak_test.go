package daemon

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/testenv"
)

func soakFor() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("ARBOR_TEST_SOAK")); err == nil && d > 0 {
		return d
	}
	return 3 * time.Second
}

// TestSoakRealDaemon: 32 clients issue random verbs, and write files into
// live nodes through their mounts, on one tree of the real daemon
// (ARBOR_TEST_SOAK long, default 3 s). Every refusal is a typed error of a
// known code, never internal; afterwards the tree holds together and is
// within its budget.
func TestSoakRealDaemon(t *testing.T) {
	testenv.NeedFUSE(t)
	home := tempDir(t)
	sock := filepath.Join(home, "arbord.sock")
	startDaemon(t, Config{Home: home, Socket: sock})
	base := tempDir(t)
	writeFile(t, filepath.Join(base, "src", "main.go"), "package main\n")
	cl := client.New(sock)
	defer cl.Close()
	ctx := context.Background()
	tr, err := cl.TreeCreate(ctx, client.TreeSpec{Base: base, Budget: &api.Budget{MaxLiveNodes: 6}})
	if err != nil {
		t.Fatal(err)
	}
	id := tr.TreeID
	var maxNode atomic.Int64
	maxNode.Store(1)
	node := func(r *rand.Rand) string { return fmt.Sprintf("n%d", 1+r.IntN(int(maxNode.Load()))) }
	// seen raises the highest node id the clients pick from.
	seen := func(id string) {
		var k int64
		if _, err := fmt.Sscanf(id, "n%d", &k); err != nil {
			return
		}
		for cur := maxNode.Load(); k > cur && !maxNode.CompareAndSwap(cur, k); cur = maxNode.Load() {
		}
	}
	deadline := time.Now().Add(soakFor())
	var verbs, ok atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 32)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; time.Now().Before(deadline); i++ {
				n := node(r)
				var req api.Request
				switch r.IntN(12) {
				case 0, 1:
					req = api.Request{Op: api.OpTreeFork, TreeID: id, SourceID: n, Label: "f"}
				case 2:
					req = api.Request{Op: api.OpTreeForkBatch, TreeID: id, SourceID: n, Labels: []string{"a", "b"}}
				case 3:
					req = api.Request{Op: api.OpTreeCommit, TreeID: id, NodeID: n}
				case 4:
					req = api.Request{Op: api.OpTreeAbort, TreeID: id, NodeID: n}
				case 5:
					req = api.Request{Op: api.OpTreeProtect, TreeID: id, NodeID: n}
				case 6:
					req = api.Request{Op: api.OpTreeUnprotect, TreeID: id, NodeID: n}
				case 7:
					req = api.Request{Op: api.OpTreePrune, TreeID: id, NodeID: n}
				case 8:
					req = api.Request{Op: api.OpTreeSuspend, TreeID: id, NodeID: n}
				case 9:
					req = api.Request{Op: api.OpTreeResume, TreeID: id, NodeID: n}
				case 10:
					req = api.Request{Op: api.OpTreeAutoEvict, TreeID: id}
				default:
					// Write into a live node's files through its mount.
					resp, err := cl.Nodes(ctx, id)
					if err != nil {
						errc <- fmt.Errorf("tree_nodes: %w", err)
						return
					}
					if len(resp.Nodes) > 0 {
						nd := resp.Nodes[r.IntN(len(resp.Nodes))]
						if nd.Path != "" && nd.State == api.StateLive && nd.ID != tr.Root {
							os.WriteFile(filepath.Join(nd.Path, fmt.Sprintf("w%d-%d", w, i)), []byte("x"), 0o644)
						}
					}
					continue
				}
				verbs.Add(1)
				resp, err := cl.Do(ctx, req)
				if err != nil {
					var ae *api.Error
					if !errors.As(err, &ae) || ae.Code == api.CodeInternal {
						errc <- fmt.Errorf("%s %s: untyped or internal error: %v", req.Op, n, err)
						return
					}
					continue
				}
				ok.Add(1)
				for _, f := range resp.Forks {
					seen(f.NodeID)
				}
				seen(resp.NodeID)
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	resp, err := cl.Nodes(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	byID := map[string]api.Node{}
	live := 0
	for _, n := range resp.Nodes {
		byID[n.ID] = n
		if n.State == api.StateLive {
			live++
		}
	}
	if _, found := byID[tr.Root]; !found {
		t.Fatalf("the root %s is gone", tr.Root)
	}
	for _, n := range resp.Nodes {
		if n.ID == tr.Root {
			continue
		}
		p, found := byID[n.Parent]
		if !found {
			t.Fatalf("%s: parent %s missing", n.ID, n.Parent)
		}
		listed := false
		for _, c := range p.Children {
			listed = listed || c == n.ID
		}
		if !listed {
			t.Fatalf("%s is not among %s's children %v", n.ID, p.ID, p.Children)
		}
		if p.State == api.StateStale && n.State != api.StateStale {
			t.Fatalf("%s is %s under stale %s", n.ID, n.State, p.ID)
		}
	}
	if live > 6 {
		t.Fatalf("%d live nodes, budget 6", live)
	}
	t.Logf("%d verbs, %d accepted, %d nodes at the end (%d live)", verbs.Load(), ok.Load(), len(resp.Nodes), live)
}
