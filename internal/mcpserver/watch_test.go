package mcpserver

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbor-dev/arbor/api"
)

// events is a Handler whose one tree "t" streams what the test sends.
type events struct {
	ch chan api.Event

	mu   sync.Mutex
	ctxs []context.Context // of every Watch call
}

// last is the context of the last Watch call.
func (e *events) last() context.Context {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ctxs[len(e.ctxs)-1]
}

func (e *events) watches() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.ctxs)
}

func (e *events) Do(ctx context.Context, req api.Request) (api.Response, error) {
	return api.Response{Status: "tree_nodes", TreeID: "t", Root: "n1", Nodes: []api.Node{{ID: "n1", State: api.StateLive}}}, nil
}

func (e *events) Watch(ctx context.Context, id string) (api.Response, <-chan api.Event, error) {
	if id != "t" {
		return api.Response{}, nil, api.Errorf(api.ErrNotFound, "tree %q", id)
	}
	e.mu.Lock()
	e.ctxs = append(e.ctxs, ctx)
	e.mu.Unlock()
	return api.Response{}, e.ch, nil
}

func session(t *testing.T, s *Server, version string, updated chan<- string) *mcp.ClientSession {
	st, ct := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, st) }()
	t.Cleanup(func() { cancel(); <-done })
	c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) { updated <- r.Params.URI },
	})
	cs, err := c.Connect(t.Context(), ct, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func (s *Server) watching(uri string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watches[uri] != nil
}

// TestWatchLifetime: sessions subscribed to one tree share one watch; a
// burst of events is one notification to each; the watch outlives the
// subscribing request; and a session that left without unsubscribing (the
// legacy protocol has no signal for it) ends the watch at the next event.
func TestWatchLifetime(t *testing.T) {
	h := &events{ch: make(chan api.Event, 64)}
	s, err := New(Config{Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	uri := NodesURI("t")
	up1, up2 := make(chan string, 16), make(chan string, 16)
	a := session(t, s, "2025-06-18", up1)
	b := session(t, s, "2025-06-18", up2)
	for _, cs := range []*mcp.ClientSession{a, b} {
		if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: uri}); err != nil {
			t.Fatal(err)
		}
	}
	if n := h.watches(); n != 1 || !s.watching(uri) {
		t.Fatalf("%d watches for two subscribers, want 1", n)
	}
	for i := range 50 { // one fork_batch
		h.ch <- api.Event{Seq: uint64(i + 1), Kind: "fork", TreeID: "t"}
	}
	for _, up := range []chan string{up1, up2} {
		select {
		case got := <-up:
			if got != uri {
				t.Errorf("update of %s", got)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no update")
		}
	}
	time.Sleep(100 * time.Millisecond)
	if n := len(up1) + len(up2); n > 2 {
		t.Errorf("%d more updates for one burst of 50 events, want at most one more each", n)
	}
	// a leaves politely, b just goes.
	if err := a.Unsubscribe(t.Context(), &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if !s.watching(uri) {
		t.Fatal("the watch ended with a subscriber left")
	}
	b.Close()
	for deadline := time.Now().Add(10 * time.Second); s.watching(uri); time.Sleep(10 * time.Millisecond) {
		h.ch <- api.Event{Kind: "commit", TreeID: "t"}
		if time.Now().After(deadline) {
			t.Fatal("the watch outlived its last session")
		}
	}
	if h.last().Err() == nil {
		t.Fatal("the watch's context did not end with it")
	}
	// Close with a watch open ends it and waits.
	c := session(t, s, "2025-06-18", make(chan string, 64))
	if err := c.Subscribe(t.Context(), &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatal(err)
	}
	if n := h.watches(); n != 2 {
		t.Fatalf("%d watches, want a second one", n)
	}
	s.Close()
	if h.last().Err() == nil {
		t.Fatal("Close returned with a watch open")
	}
	if s.watching(uri) {
		t.Error("a watch is left after Close")
	}
}
