package mcpserver_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/mcpserver"
)

// noTrees is a Handler with no trees.
type noTrees struct{}

func (noTrees) Do(ctx context.Context, req api.Request) (api.Response, error) {
	return api.Response{}, api.Errorf(api.ErrNotFound, "%s: tree %q", req.Op, req.TreeID)
}

func (noTrees) Watch(ctx context.Context, id string) (api.Response, <-chan api.Event, error) {
	return api.Response{}, nil, api.Errorf(api.ErrNotFound, "tree %q", id)
}

// recorder is a Handler with exec and files that records what the tools
// asked of it: a test double of the daemon's router (the real one is
// TestScriptedAgent's).
type recorder struct {
	noTrees
	reqs  []api.Request
	out   int // bytes of output Exec writes
	file  int // bytes ReadFile writes
	fails error
}

func (r *recorder) Do(ctx context.Context, req api.Request) (api.Response, error) {
	r.reqs = append(r.reqs, req)
	return api.Response{Status: "ok", File: &api.FileInfo{Size: int64(r.file)}, Entries: []api.FileInfo{{Name: "a", Type: "file", Size: 1}}}, r.fails
}

func (r *recorder) Exec(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (api.ExecExit, error) {
	r.reqs = append(r.reqs, req)
	for i := 0; i < r.out; i += 1000 {
		out(api.ExecOutput{Stream: "stdout", Data: []byte(strings.Repeat("x", min(1000, r.out-i)))})
	}
	return api.ExecExit{DurationNS: 1}, r.fails
}

func (r *recorder) ReadFile(ctx context.Context, tree, node, path string, w io.Writer) (api.FileInfo, error) {
	for i := 0; i < r.file; i += 4096 {
		if _, err := w.Write(make([]byte, min(4096, r.file-i))); err != nil {
			return api.FileInfo{}, err
		}
	}
	return api.FileInfo{Size: int64(r.file)}, r.fails
}

func (r *recorder) last() api.Request { return r.reqs[len(r.reqs)-1] }

// pipe serves cfg to the client c over an in-process pipe (stdio's
// framing) until the test ends.
func pipe(t *testing.T, cfg mcpserver.Config, c *mcp.Client, o *mcp.ClientSessionOptions) *mcp.ClientSession {
	srv, err := mcpserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, st) }()
	t.Cleanup(func() { cancel(); <-done; srv.Close() })
	cs, err := c.Connect(t.Context(), ct, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func connect(t *testing.T, cfg mcpserver.Config) agent {
	return agent{t, pipe(t, cfg, mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil), nil)}
}

// TestSandboxTools: exec and the files tools reach the Handler's verbs
// with their bounds applied (a timeout, the last max_output_bytes kept,
// the first max_bytes read), and its errors keep their codes.
func TestSandboxTools(t *testing.T) {
	sb := &recorder{}
	a := connect(t, mcpserver.Config{Handler: sb})
	node := func(kv ...any) map[string]any {
		m := map[string]any{"tree_id": "t", "node_id": "n2"}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	for _, c := range []struct {
		timeout, maxOut         int64
		wantTimeout, wantMaxOut int64
	}{
		{0, 0, 30, 1 << 20},
		{5, 100, 5, 100},
		{100000, 1 << 40, 600, 16 << 20},
	} {
		// Past the cap, the last bytes stay (16 MiB is too large a reply
		// for this transport: there, less than the cap comes whole).
		wantLen, wantCut := c.wantMaxOut, true
		sb.out = int(c.wantMaxOut) + 10
		if c.wantMaxOut > 1<<20 {
			sb.out, wantLen, wantCut = 5000, 5000, false
		}
		var out mcpserver.ExecOut
		a.call("exec", node("argv", []string{"go", "test"}, "timeout_seconds", c.timeout, "max_output_bytes", c.maxOut, "cwd", "/workspace/src", "env", map[string]string{"B": "2", "A": "1"}), &out)
		if int64(len(out.Stdout)) != wantLen || out.Truncated != wantCut {
			t.Errorf("exec with max %d: %d bytes of output, truncated %v", c.maxOut, len(out.Stdout), out.Truncated)
		}
		r := sb.last()
		if r.TimeoutNS != c.wantTimeout*int64(time.Second) || r.Cwd != "src" || strings.Join(r.Env, " ") != "A=1 B=2" {
			t.Errorf("exec timeout %d: the verb got %+v", c.timeout, r)
		}
	}
	a.fail("exec", node("argv", []string{"x"}, "cwd", "/etc"), api.CodeBadRequest)
	a.fail("exec", node("argv", []string{}), api.CodeBadRequest)
	a.fail("exec", node("argv", []string{"x"}, "timeout_seconds", -1), api.CodeBadRequest)
	sb.file = 3 << 20
	var rf mcpserver.ReadFileOut
	a.call("read_file", node("path", "a"), &rf)
	if len(rf.Content) != mcpserver.DefaultMaxReadBytes || !rf.Truncated || rf.Size != 3<<20 {
		t.Errorf("read_file of 3 MiB without max_bytes: %d bytes, truncated %v, size %d", len(rf.Content), rf.Truncated, rf.Size)
	}
	sb.file = 10
	rf = mcpserver.ReadFileOut{}
	a.call("read_file", node("path", "a", "max_bytes", 10), &rf)
	if len(rf.Content) != 10 || rf.Truncated || rf.Size != 10 {
		t.Errorf("read_file of exactly max_bytes: %+v", rf)
	}
	sb.reqs = nil
	a.call("write_file", node("path", "d/e/a", "content", "b"), nil)
	if len(sb.reqs) != 2 || sb.reqs[0].Op != api.OpFileMkdir || sb.reqs[0].Path != "/d/e" || !sb.reqs[0].Parents ||
		sb.reqs[1].Mode != 0o644 || string(sb.reqs[1].Data) != "b" {
		t.Errorf("write_file asked %+v", sb.reqs)
	}
	a.fail("write_file", node("path", "a", "content", "b", "mode", 0o4755), api.CodeBadRequest)
	var ls mcpserver.ListFilesOut
	a.call("list_files", node("path", ""), &ls)
	if len(ls.Entries) != 1 || ls.Entries[0].Kind != "file" {
		t.Errorf("list_files: %+v", ls)
	}
	sb.fails = api.Errorf(api.ErrState, "node n2 is suspended")
	a.fail("exec", node("argv", []string{"true"}), api.CodeState)
	a.fail("list_files", node("path", ""), api.CodeState)
	// The Handler's errors too, and a resource of no tree.
	sb.fails = api.Errorf(api.ErrNotFound, "tree_nodes: tree \"t\"")
	a.fail("nodes", map[string]any{"tree_id": "t"}, api.CodeNotFound)
	if _, err := a.cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: mcpserver.NodesURI("t")}); err == nil {
		t.Error("read the nodes of no tree")
	}
	// (A subscription to no tree fails on the server, but the SDK's client
	// sends protocol 2026-07-28's subscriptions/listen without waiting for
	// its answer: nothing here can see that failure.)
}
