package engine_test

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
)

// blockingReader gives one chunk, then waits until its context ends.
type blockingReader struct {
	ctx  context.Context
	sent bool
}

func (b *blockingReader) Read(p []byte) (int, error) {
	if !b.sent {
		b.sent = true
		return copy(p, "partial"), nil
	}
	<-b.ctx.Done()
	return 0, b.ctx.Err()
}

// TestFilesVerbs: the files verbs on a dir tree through the engine: a
// write and a read of a node's file; a read held open while its node is
// aborted fails naming the abort; a write cut short leaves the file as it
// was; a suspended node refuses writes (bad_state) and serves reads;
// background processes are not_supported on dir.
func TestFilesVerbs(t *testing.T) {
	e := newEngine(t, t.TempDir())
	ctx := context.Background()
	do(t, e, api.Request{Op: api.OpTreeCreate, TreeID: "f", Base: newBase(t)})
	c := do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "f", SourceID: "n1"})
	n := c.NodeID
	fi, err := e.WriteFile(ctx, api.Request{TreeID: "f", NodeID: n, Path: "/d.txt", Mode: 0o600}, strings.NewReader("data"))
	if err != nil || fi.Size != 4 || fi.Mode != 0o600 {
		t.Fatalf("write: %+v %v", fi, err)
	}
	r := do(t, e, api.Request{Op: api.OpFileRead, TreeID: "f", NodeID: n, Path: "d.txt"})
	if string(r.Data) != "data" || r.File.Size != 4 {
		t.Fatalf("file_read through Do: %+v", r)
	}
	if got := readFile(t, c.Path, "d.txt"); got != "data" {
		t.Fatalf("the node's path holds %q", got)
	}

	// A write cut short (its request ended) changes nothing.
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := e.WriteFile(wctx, api.Request{TreeID: "f", NodeID: n, Path: "d.txt"}, &blockingReader{ctx: wctx})
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a write whose request ended succeeded")
	}
	if got := readFile(t, c.Path, "d.txt"); got != "data" {
		t.Fatalf("after a cut write the file is %q", got)
	}
	ents, _ := os.ReadDir(c.Path)
	for _, en := range ents {
		if strings.HasPrefix(en.Name(), ".arbor-write") {
			t.Errorf("a cut write left %s", en.Name())
		}
	}

	// A read held open across an abort of its node fails naming it.
	big := strings.Repeat("x", 1<<20)
	if _, err := e.WriteFile(ctx, api.Request{TreeID: "f", NodeID: n, Path: "big"}, strings.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	rc, _, err := e.OpenFile(ctx, api.Request{TreeID: "f", NodeID: n, Path: "big"})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1000)
	if _, err := rc.Read(buf); err != nil {
		t.Fatal(err)
	}
	do(t, e, api.Request{Op: api.OpTreeAbort, TreeID: "f", NodeID: n})
	_, err = io.ReadAll(rc)
	if !errors.Is(err, api.ErrState) || !strings.Contains(err.Error(), "aborted") {
		t.Errorf("a read across an abort: %v, want bad_state naming the abort", err)
	}
	rc.Close()

	// Suspended: writes refused, reads served.
	c2 := do(t, e, api.Request{Op: api.OpTreeFork, TreeID: "f", SourceID: "n1"})
	do(t, e, api.Request{Op: api.OpTreeSuspend, TreeID: "f", NodeID: c2.NodeID})
	_, err = e.WriteFile(ctx, api.Request{TreeID: "f", NodeID: c2.NodeID, Path: "x"}, strings.NewReader("x"))
	wantErr(t, err, api.ErrState, "write to a suspended node")
	r = do(t, e, api.Request{Op: api.OpFileStat, TreeID: "f", NodeID: c2.NodeID, Path: "a.txt"})
	if r.File == nil || r.File.Size != 4 {
		t.Errorf("stat on a suspended node: %+v", r.File)
	}
	_, err = e.Do(ctx, api.Request{Op: api.OpFileMkdir, TreeID: "f", NodeID: c2.NodeID, Path: "d"})
	wantErr(t, err, api.ErrState, "mkdir on a suspended node")

	// No background processes on dir; bad input.
	_, err = e.Do(ctx, api.Request{Op: api.OpTreeExec, TreeID: "f", NodeID: "n1", Argv: []string{"true"}, Detach: true})
	wantErr(t, err, api.ErrNotSupported, "detach on dir")
	_, err = e.Do(ctx, api.Request{Op: api.OpExecList, TreeID: "f", NodeID: "n1"})
	wantErr(t, err, api.ErrNotSupported, "exec_list on dir")
	_, err = e.Do(ctx, api.Request{Op: api.OpFileStat, TreeID: "f", NodeID: "n1", Path: strings.Repeat("a/", 3000)})
	wantErr(t, err, api.ErrBadRequest, "a path too long")
	_, err = e.Do(ctx, api.Request{Op: api.OpFileWrite, TreeID: "f", NodeID: "n1", Path: "m", Mode: 0o10000})
	wantErr(t, err, api.ErrBadRequest, "a mode beyond permissions")
	_, err = e.Do(ctx, api.Request{Op: api.OpFileRead, TreeID: "f", NodeID: "n1", Path: filepath.Join("..", "..", "etc", "passwd")})
	wantErr(t, err, api.ErrNotFound, "a path out of the node")
}
