package lineapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/facetest"
)

var knownCodes = func() map[string]bool {
	m := map[string]bool{}
	for _, c := range api.Codes() {
		m[c] = true
	}
	return m
}()

// FuzzLineAPI feeds arbitrary bytes to one connection's decode and dispatch
// (against the real engine, with a tree "t" and node "n1" to hit): it must
// not panic, every reply must be one well-formed JSON line, every error reply
// must carry a known code and a message, and without a watch every non-blank
// request line gets exactly one reply.
func FuzzLineAPI(f *testing.F) {
	for _, s := range []string{
		`{"op":"ping"}`,
		`{"op":"tree_fork","tree_id":"t","source_id":"n1","label":"a"}` + "\n" + `{"op":"tree_commit","tree_id":"t","node_id":"n2"}`,
		`{"op":"tree_fork_batch","tree_id":"t","source_id":"n1","labels":["a","b"]}`,
		`{"op":"tree_watch","tree_id":"t"}` + "\n" + `{"op":"ping"}`,
		`{"op":"tree_nodes","tree_id":"t","x":1}`,
		`{"op":"tree_create","base":"/b","budget":{"max_live_nodes":-1}}`,
		"\x00\xff{",
		`[]`, `null`, `"op"`, `{"op":"ping"} {"op":"ping"}`,
	} {
		f.Add([]byte(s))
	}
	// One engine for every input: a fresh one, or a fresh tree, costs
	// milliseconds (the engine syncs its metadata when it creates and
	// deletes trees), and 50,000 inputs must fit a test run. Each input
	// finds tree "t" loaded with its root n1 (made again when an input
	// dropped or deleted it, or grew it past a few nodes): the property
	// checked, one well-formed reply per request line, holds in any state.
	eng := facetest.NewEngine(f)
	s, err := New(Config{Handler: eng, MaxLineBytes: 4096})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		eng.KeepTree(t, "t", "/b", 16)
		var out bytes.Buffer
		nc := &bufConn{r: bytes.NewReader(data), w: &out}
		c := &conn{s: s, nc: nc, idle: -1, br: bufio.NewReaderSize(nc, 4<<10)}
		c.serve(ctx)
		c.wg.Wait()
		c.flush()
		cancel()
		eng.Wait()

		replies := 0
		for line := range strings.Lines(out.String()) {
			if !strings.HasSuffix(line, "\n") {
				t.Fatalf("reply not newline-terminated: %q", line)
			}
			var r api.Response
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("reply is not JSON: %q: %v", line, err)
			}
			if r.Status == "" {
				t.Fatalf("reply without status: %q", line)
			}
			if r.Status == api.StatusError && (!knownCodes[r.Code] || r.Message == "") {
				t.Fatalf("error reply without a known code and a message: %q", line)
			}
			replies++
		}
		if bytes.Contains(data, []byte("tree_watch")) {
			return
		}
		want := 0
		for l := range bytes.Lines(data) {
			if len(bytes.TrimSpace(l)) > 0 {
				want++
			}
		}
		if replies != want {
			t.Fatalf("%d replies to %d non-blank lines\ninput %q\noutput %q", replies, want, data, out.String())
		}
	})
}

// bufConn is a net.Conn over an input and an output buffer.
type bufConn struct {
	net.Conn // nil: only the methods below are used
	r        io.Reader
	w        io.Writer
}

func (c *bufConn) Read(b []byte) (int, error)       { return c.r.Read(b) }
func (c *bufConn) Write(b []byte) (int, error)      { return c.w.Write(b) }
func (c *bufConn) SetReadDeadline(time.Time) error  { return nil }
func (c *bufConn) SetWriteDeadline(time.Time) error { return nil }
