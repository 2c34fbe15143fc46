package client_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/facetest"
	"github.com/arbor-dev/arbor/internal/lineapi"
)

// blocking makes tree_list wait until its ctx ends.
type blocking struct{ *facetest.Engine }

func (b blocking) Do(ctx context.Context, req api.Request) (api.Response, error) {
	if req.Op == api.OpTreeList {
		<-ctx.Done()
		return api.Response{}, api.Errorf(api.ErrInternal, "cancelled")
	}
	return b.Engine.Do(ctx, req)
}

// server runs lineapi for h at path until the returned stop is called (or cleanup).
func server(t *testing.T, path string, h lineapi.Handler) (stop func()) {
	t.Helper()
	ln, err := lineapi.Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := lineapi.New(lineapi.Config{Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Serve(ctx, ln); close(done) }()
	stop = func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return")
		}
	}
	t.Cleanup(stop)
	return stop
}

func sockPath(t *testing.T) string {
	d, err := os.MkdirTemp("", "cl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return filepath.Join(d, "s.sock")
}

func TestVerbs(t *testing.T) {
	path := sockPath(t)
	server(t, path, facetest.NewEngine(t))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	v, err := c.Ping(ctx)
	must(err)
	if v != facetest.Version {
		t.Fatalf("Ping: %q", v)
	}
	cr, err := c.TreeCreate(ctx, client.TreeSpec{TreeID: "t", Base: "/b", Budget: &api.Budget{MaxLiveNodes: 3}})
	must(err)
	root := cr.Root
	forks, lat, err := c.ForkBatch(ctx, "t", root, []string{"a", "b"})
	must(err)
	if len(forks) != 2 || lat <= 0 {
		t.Fatalf("ForkBatch: %+v %v", forks, lat)
	}
	one, err := c.Fork(ctx, "t", root, "c")
	must(err)
	rb, err := c.Rollback(ctx, "t", root, "d")
	must(err)
	if one.NodeID == "" || rb.NodeID == "" || one.Label != "c" {
		t.Fatalf("Fork %+v Rollback %+v", one, rb)
	}
	stale, err := c.Commit(ctx, "t", forks[0].NodeID)
	must(err)
	slices.Sort(stale)
	want := []string{forks[1].NodeID, one.NodeID, rb.NodeID}
	slices.Sort(want)
	if !slices.Equal(stale, want) {
		t.Fatalf("Commit: stale %v, want %v", stale, want)
	}
	_, err = c.Commit(ctx, "t", forks[1].NodeID)
	if !errors.Is(err, api.ErrStale) {
		t.Fatalf("second Commit: %v, want ErrStale", err)
	}
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != api.CodeStale {
		t.Fatalf("second Commit: %#v is not an *api.Error{stale}", err)
	}
	must(c.Abort(ctx, "t", forks[1].NodeID))
	if err := c.Protect(ctx, "t", one.NodeID); !errors.Is(err, api.ErrState) {
		t.Fatalf("Protect a stale node: %v, want ErrState", err)
	}
	must(c.Abort(ctx, "t", one.NodeID))
	keep, err := c.Fork(ctx, "t", root, "keep")
	must(err)
	must(c.Protect(ctx, "t", keep.NodeID))
	if err := c.Prune(ctx, "t", keep.NodeID); !errors.Is(err, api.ErrProtected) {
		t.Fatalf("Prune protected: %v", err)
	}
	must(c.Unprotect(ctx, "t", keep.NodeID))
	must(c.Prune(ctx, "t", keep.NodeID))
	e, err := c.Fork(ctx, "t", root, "e")
	must(err)
	must(c.Suspend(ctx, "t", e.NodeID))
	p, err := c.Resume(ctx, "t", e.NodeID)
	must(err)
	if p == "" {
		t.Fatal("Resume: no path")
	}
	ev, err := c.AutoEvict(ctx, "t")
	must(err)
	if len(ev) != 0 {
		t.Fatalf("AutoEvict under budget evicted %v", ev)
	}
	n, err := c.Nodes(ctx, "t")
	must(err)
	if len(n.Nodes) != 3 || n.Budget.MaxLiveNodes != 3 {
		t.Fatalf("Nodes: %+v budget %+v", n.Nodes, n.Budget)
	}
	ts, err := c.List(ctx)
	must(err)
	if len(ts) != 1 || ts[0].ID != "t" {
		t.Fatalf("List: %+v", ts)
	}
	_, err = c.Open(ctx, "t")
	must(err)
	must(c.Drop(ctx, "t"))
	if _, err := c.Nodes(ctx, "t"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("Nodes after Drop: %v", err)
	}
	if _, err := c.Do(ctx, api.Request{Op: api.OpTreeWatch}); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("Do(tree_watch): %v, want ErrBadRequest", err)
	}
}

func TestCancel(t *testing.T) {
	path := sockPath(t)
	server(t, path, blocking{facetest.NewEngine(t)})
	c := client.New(path)
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.List(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("List past its deadline: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("deadline honoured after %v", d)
	}
	// Explicit cancellation from another goroutine.
	cctx, ccancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, ccancel)
	if _, err := c.List(cctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("List cancelled: %v", err)
	}
	// The abandoned connections are not reused: the next call works.
	if _, err := c.Ping(t.Context()); err != nil {
		t.Fatalf("Ping after cancellations: %v", err)
	}
}

func TestReconnect(t *testing.T) {
	path := sockPath(t)
	stop := server(t, path, facetest.NewEngine(t))
	ctx := t.Context()
	c, err := client.Dial(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	stop() // the pooled connection is now dead
	if _, err := c.Ping(ctx); err == nil {
		t.Fatal("Ping with the daemon down succeeded")
	}
	server(t, path, facetest.NewEngine(t))
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping after the daemon restarted: %v", err)
	}
}

func TestClosedAndNoDaemon(t *testing.T) {
	path := sockPath(t)
	if _, err := client.Dial(t.Context(), path); err == nil {
		t.Fatal("Dial with no daemon succeeded")
	}
	server(t, path, facetest.NewEngine(t))
	c := client.New(path)
	c.Close()
	if _, err := c.Ping(t.Context()); err == nil {
		t.Fatal("Ping on a closed client succeeded")
	}
	if _, err := c.Watch(t.Context(), ""); err == nil {
		t.Fatal("Watch on a closed client succeeded")
	}
}

func TestWatchAllTrees(t *testing.T) {
	path := sockPath(t)
	server(t, path, facetest.NewEngine(t))
	c := client.New(path)
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	snap, events, err := c.WatchSnapshot(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if snap.Status != "tree_watching" {
		t.Fatalf("snapshot: %+v", snap)
	}
	for _, id := range []string{"a", "b"} {
		if _, err := c.TreeCreate(ctx, client.TreeSpec{TreeID: id, Base: "/b"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"a", "b"} {
		select {
		case ev := <-events:
			if ev.Kind != "create" || ev.TreeID != id {
				t.Fatalf("event %+v, want create of %s", ev, id)
			}
		case <-ctx.Done():
			t.Fatal("no event")
		}
	}
}

// A server that answers garbage yields an error, not a panic or a hang.
func TestGarbageReply(t *testing.T) {
	path := sockPath(t)
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 100)
		c.Read(buf)
		c.Write([]byte("not json\n"))
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	if _, err := client.New(path).Ping(ctx); err == nil {
		t.Fatal("garbage reply: no error")
	}
}

func TestLoadToken(t *testing.T) {
	home := t.TempDir()
	if _, err := client.LoadToken(home); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no token file: %v, want ErrNotExist", err)
	}
	path := filepath.Join(home, api.HTTPTokenFile)
	if err := os.WriteFile(path, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := client.LoadToken(home); err == nil {
		t.Fatal("an empty token file gave a token")
	}
	if err := os.WriteFile(path, []byte("abc123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := client.LoadToken(home); err != nil || tok != "abc123" {
		t.Fatalf("LoadToken: %q %v", tok, err)
	}
}
