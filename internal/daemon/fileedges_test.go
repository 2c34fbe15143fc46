package daemon

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/store"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestFilesDotSegments: a path with "." and ".." segments names the same
// file over the socket and over HTTP (through the Go client, and sent raw
// as a client that does not clean its paths sends it): resolved inside
// the node, ".." at its top staying there, never a redirect.
func TestFilesDotSegments(t *testing.T) {
	testenv.NeedFUSE(t)
	tg := realTarget(t)
	line := client.New(serveLine(t, tg.Handler))
	defer line.Close()
	base := serveHTTP(t, tg.Handler)
	hc := client.NewHTTP(base, testToken, nil)
	for _, tc := range []struct {
		name string
		f    fileFace
	}{{"line", lineFiles{line}}, {"http", httpFiles{hc}}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			dir := tempDir(t)
			writeFile(t, filepath.Join(dir, "b"), "bee")
			cr, err := tc.f.Do(ctx, api.Request{Op: api.OpTreeCreate, TreeID: "dots-" + tc.name, Base: dir})
			if err != nil {
				t.Fatal(err)
			}
			tree, n1 := "dots-"+tc.name, cr.NodeID
			if _, err := tc.f.Do(ctx, api.Request{Op: api.OpFileMkdir, TreeID: tree, NodeID: n1, Path: "a"}); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"a/../b", "./a/./../b", "../../b", "a/..//./b"} {
				var got bytes.Buffer
				if _, err := tc.f.ReadFile(ctx, tree, n1, p, &got); err != nil || got.String() != "bee" {
					t.Errorf("read %s: %q, %v; want b's", p, got.String(), err)
				}
				st, err := tc.f.Do(ctx, api.Request{Op: api.OpFileStat, TreeID: tree, NodeID: n1, Path: p})
				if err != nil || st.File == nil || st.File.Size != 3 {
					t.Errorf("stat %s: %+v, %v", p, st.File, err)
				}
			}
			if _, err := tc.f.WriteFile(ctx, tree, n1, "a/../a/./c", 0, bytes.NewReader([]byte("sea"))); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if _, err := tc.f.ReadFile(ctx, tree, n1, "a/c", &got); err != nil || got.String() != "sea" {
				t.Errorf("read a/c after a write of a/../a/./c: %q, %v", got.String(), err)
			}
			l, err := tc.f.Do(ctx, api.Request{Op: api.OpFileList, TreeID: tree, NodeID: n1, Path: "a/c/.."})
			if err != nil || len(l.Entries) != 1 || l.Entries[0].Name != "c" {
				t.Errorf("list a/c/..: %+v, %v", l.Entries, err)
			}
			if _, err := tc.f.Do(ctx, api.Request{Op: api.OpFileRemove, TreeID: tree, NodeID: n1, Path: "a/../a/c"}); err != nil {
				t.Errorf("remove a/../a/c: %v", err)
			}
			if tc.name != "http" {
				return
			}
			// Raw: the segments as they are, not escaped, and an empty one.
			for _, tc := range []struct{ method, path, want string }{
				{"GET", "/v1/trees/" + tree + "/nodes/" + n1 + "/files/a/../b", "bee"},
				{"GET", "/v1/trees/" + tree + "/nodes/" + n1 + "/files/./a/..//b", "bee"},
				// Above the files: still the node's b, not another route.
				{"GET", "/v1/trees/" + tree + "/nodes/" + n1 + "/files/../../n1/files/b", ""},
				{"GET", "/v1/trees/" + tree + "/nodes/" + n1 + "/files/../../../../b", "bee"},
			} {
				hr, err := http.NewRequestWithContext(ctx, tc.method, base+tc.path, nil)
				if err != nil {
					t.Fatal(err)
				}
				hr.Header.Set("Authorization", "Bearer "+testToken)
				res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(hr)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if tc.want == "" {
					if res.StatusCode != http.StatusNotFound {
						t.Errorf("%s %s: HTTP %d %q; want 404 (the node's /n1/files/b)", tc.method, tc.path, res.StatusCode, b)
					}
					continue
				}
				if res.StatusCode != http.StatusOK || string(b) != tc.want {
					t.Errorf("%s %s: HTTP %d %q; want 200 %q", tc.method, tc.path, res.StatusCode, b, tc.want)
				}
			}
		})
	}
}

// TestFilesRefusedUpload: an 8 MiB upload over HTTP that the daemon
// refuses before it reads the body (no such node, a suspended node) comes
// back to the Go client as the typed error, not as a connection reset.
func TestFilesRefusedUpload(t *testing.T) {
	testenv.NeedFUSE(t)
	tg := realTarget(t)
	hc := client.NewHTTP(serveHTTP(t, tg.Handler), testToken, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cr, err := hc.Do(ctx, api.Request{Op: api.OpTreeCreate, TreeID: "up", Base: tg.Base})
	if err != nil {
		t.Fatal(err)
	}
	fk, err := hc.Do(ctx, api.Request{Op: api.OpTreeFork, TreeID: "up", SourceID: cr.NodeID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hc.Do(ctx, api.Request{Op: api.OpTreeSuspend, TreeID: "up", NodeID: fk.NodeID}); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 8<<20/16)
	for _, tc := range []struct {
		name, tree, node string
		want             error
	}{
		{"unknown node", "up", "n99", api.ErrNotFound},
		{"unknown tree", "nope", "n1", api.ErrNotFound},
		{"suspended node", "up", fk.NodeID, api.ErrState},
	} {
		if _, err := hc.WriteFile(ctx, tc.tree, tc.node, "big.bin", 0, bytes.NewReader(big)); !errors.Is(err, tc.want) {
			t.Errorf("%s, a sized body: %v; want %v", tc.name, err, tc.want)
		}
		// A body of unknown size is not sent: the client waits for the
		// server's 100 Continue, and the refusal comes instead.
		sent := &countingReader{r: bytes.NewReader(big)}
		if _, err := hc.WriteFile(ctx, tc.tree, tc.node, "big.bin", 0, sent); !errors.Is(err, tc.want) {
			t.Errorf("%s, a streamed body: %v; want %v", tc.name, err, tc.want)
		}
		if n := sent.n.Load(); n >= 1<<20 {
			t.Errorf("%s: %d bytes of the refused body read to be sent", tc.name, n)
		}
	}
	// A small write is still one request and lands.
	if _, err := hc.WriteFile(ctx, "up", cr.NodeID, "small", 0, bytes.NewReader([]byte("s"))); err != nil {
		t.Fatal(err)
	}
	if fi, err := hc.WriteFile(ctx, "up", cr.NodeID, "big.bin", 0, bytes.NewReader(big)); err != nil || fi.Size != int64(len(big)) {
		t.Fatalf("a big write to a live node: %+v, %v", fi, err)
	}
}

// countingReader counts what was read of r (the transport reads it on
// its own goroutine).
type countingReader struct {
	r io.Reader
	n atomic.Int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

// TestFilesWriteCrash: a daemon SIGKILLed while file_writes stream in,
// one into a tree's root node (its base) and one into a fork (a layer of
// the store), leaves nothing of them: after the restart neither the files
// API nor the nodes' paths show a write's temporary (nor the target), and
// the same writes then land.
func TestFilesWriteCrash(t *testing.T) {
	testenv.NeedFUSE(t)
	dir := tempDir(t)
	home, base := filepath.Join(dir, "home"), filepath.Join(dir, "base")
	for _, d := range []string{home, base} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(base, "seed.txt"), "seed")
	sock := filepath.Join(home, "arbord.sock")
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	p := spawn(t, home, dir)
	cl := client.New(sock)
	defer func() { cl.Close() }()
	tr, err := cl.Do(ctx, api.Request{Op: api.OpTreeCreate, TreeID: "wcrash", Base: base})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Do(ctx, api.Request{Op: api.OpFileMkdir, TreeID: "wcrash", NodeID: tr.NodeID, Path: "d"}); err != nil {
		t.Fatal(err)
	}
	fk, err := cl.Do(ctx, api.Request{Op: api.OpTreeFork, TreeID: "wcrash", SourceID: tr.NodeID})
	if err != nil {
		t.Fatal(err)
	}
	nodes := map[string]string{tr.NodeID: filepath.Join(tr.Path, "d"), fk.NodeID: filepath.Join(fk.Path, "d")}
	temps := func() []string {
		var out []string
		for _, d := range nodes {
			ents, err := os.ReadDir(d)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), store.TempPrefix) {
					out = append(out, filepath.Join(d, e.Name()))
				}
			}
		}
		return out
	}
	done := make(chan error, len(nodes))
	var pipes []*io.PipeWriter
	for id := range nodes {
		pr, pw := io.Pipe()
		pipes = append(pipes, pw)
		wc := client.New(sock)
		defer wc.Close()
		go func() {
			_, err := wc.WriteFile(ctx, "wcrash", id, "d/big.bin", 0, pr)
			done <- err
		}()
		if _, err := pw.Write(bytes.Repeat([]byte("x"), 1<<20)); err != nil {
			t.Fatal(err)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); len(temps()) < len(nodes); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("temporaries of the writes in flight: %v", temps())
		}
	}
	p.kill(t)
	for _, pw := range pipes {
		pw.CloseWithError(errors.New("the daemon was killed"))
	}
	for range nodes {
		select {
		case err := <-done:
			if err == nil {
				t.Fatal("a write cut by the kill succeeded")
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a write did not end after the kill")
		}
	}
	cl.Close()

	spawn(t, home, dir)
	cl = client.New(sock)
	for id := range nodes {
		l, err := cl.Do(ctx, api.Request{Op: api.OpFileList, TreeID: "wcrash", NodeID: id, Path: "d"})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range l.Entries {
			t.Errorf("after the restart, %s's d holds %s (%d bytes)", id, e.Name, e.Size)
		}
	}
	if left := temps(); len(left) > 0 {
		t.Errorf("after the restart the nodes' paths show %v", left)
	}
	for id := range nodes {
		if fi, err := cl.WriteFile(ctx, "wcrash", id, "d/big.bin", 0, bytes.NewReader([]byte("whole"))); err != nil || fi.Size != 5 {
			t.Fatalf("the write to %s again: %+v, %v", id, fi, err)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(home, "trees", "wcrash", "writes")); err != nil || len(ents) > 0 {
		t.Errorf("the write journal after the writes: %v, %v", ents, err)
	}
}
