package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/enginetest"
)

// TestWatchAfterReload: a watcher of a tree whose verb panicked: after
// the reload it either is ended (and must resubscribe for a fresh
// snapshot) or keeps a stream whose sequence numbers go on increasing.
func TestWatchAfterReload(t *testing.T) {
	var armed atomic.Bool
	bad := newBase(t)
	e, err := engine.New(engine.Config{Home: t.TempDir(), OpenFiles: func(ctx context.Context, dir, base string) (engine.Files, error) {
		f, err := enginetest.OpenDirFiles(ctx, dir, base)
		if err != nil {
			return f, err
		}
		return panicFiles{Files: f, armed: &armed}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	t1 := do(t, e, api.Request{Op: api.OpTreeCreate, Base: bad, TreeID: "bad"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, ch, err := e.Watch(ctx, "bad")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "bad", SourceID: t1.Root})
	}
	var last uint64
	for i := 0; i < 3; i++ {
		ev := <-ch
		last = ev.Seq
	}
	armed.Store(true)
	_, err = e.Do(context.Background(), api.Request{Op: api.OpTreeFork, TreeID: "bad", SourceID: t1.Root})
	wantErr(t, err, api.ErrInternal, "fork that panics")
	armed.Store(false)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		_, err = e.Do(context.Background(), api.Request{Op: api.OpTreeNodes, TreeID: "bad"})
		if err == nil {
			break
		}
		if !errors.Is(err, api.ErrBusy) || time.Now().After(deadline) {
			t.Fatal(err)
		}
	}
	do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "bad", SourceID: t1.Root})
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return // ended: the watcher knows to resubscribe
			}
			if ev.Seq <= last {
				t.Fatalf("after the reload the same watch stream got seq %d after seq %d (kind %s)", ev.Seq, last, ev.Kind)
			}
			last = ev.Seq
		case <-time.After(2 * time.Second):
			return
		}
	}
}
