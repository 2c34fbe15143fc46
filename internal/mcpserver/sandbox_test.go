package mcpserver_test

import (
	"context"
	"io/fs"
	"testing"

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

// recorder is a Sandbox that records what the tools asked of it.
type recorder struct {
	exec  mcpserver.ExecIn
	read  int64
	mode  fs.FileMode
	fails error
}

func (r *recorder) Exec(ctx context.Context, tree, node string, in mcpserver.ExecIn) (mcpserver.ExecOut, error) {
	r.exec = in
	return mcpserver.ExecOut{Stdout: "ok\n", ExitCode: 0, DurationNS: 1}, r.fails
}

func (r *recorder) ReadFile(ctx context.Context, tree, node, path string, max int64) (mcpserver.ReadFileOut, error) {
	r.read = max
	return mcpserver.ReadFileOut{Content: "x", Size: 1}, r.fails
}

func (r *recorder) WriteFile(ctx context.Context, tree, node, path string, data []byte, mode fs.FileMode) error {
	r.mode = mode
	return r.fails
}

func (r *recorder) ListFiles(ctx context.Context, tree, node, dir string) ([]mcpserver.FileEntry, error) {
	return nil, r.fails
}

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

// TestSandboxTools: with a Sandbox, exec and the files tools reach it
// with their bounds applied, and its errors keep their codes.
func TestSandboxTools(t *testing.T) {
	sb := &recorder{}
	a := connect(t, mcpserver.Config{Handler: noTrees{}, Sandbox: sb})
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
		var out mcpserver.ExecOut
		a.call("exec", node("argv", []string{"go", "test"}, "timeout_seconds", c.timeout, "max_output_bytes", c.maxOut), &out)
		if out.Stdout != "ok\n" {
			t.Errorf("exec output %+v", out)
		}
		if int64(sb.exec.TimeoutSeconds) != c.wantTimeout || sb.exec.MaxOutputBytes != c.wantMaxOut {
			t.Errorf("exec timeout %d max %d: the sandbox got %d and %d, want %d and %d",
				c.timeout, c.maxOut, sb.exec.TimeoutSeconds, sb.exec.MaxOutputBytes, c.wantTimeout, c.wantMaxOut)
		}
	}
	a.fail("exec", node("argv", []string{}), api.CodeBadRequest)
	a.fail("exec", node("argv", []string{"x"}, "timeout_seconds", -1), api.CodeBadRequest)
	a.call("read_file", node("path", "a"), nil)
	if sb.read != mcpserver.DefaultMaxReadBytes {
		t.Errorf("read_file without max_bytes asked for %d bytes", sb.read)
	}
	a.call("write_file", node("path", "a", "content", "b"), nil)
	if sb.mode != 0o644 {
		t.Errorf("write_file's default mode %v", sb.mode)
	}
	a.fail("write_file", node("path", "a", "content", "b", "mode", 0o4755), api.CodeBadRequest)
	sb.fails = api.Errorf(api.ErrState, "node n2 is suspended")
	a.fail("exec", node("argv", []string{"true"}), api.CodeState)
	a.fail("list_files", node("path", ""), api.CodeState)
	// The Handler's errors too, and a resource of no tree.
	a.fail("nodes", map[string]any{"tree_id": "t"}, api.CodeNotFound)
	if _, err := a.cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: mcpserver.NodesURI("t")}); err == nil {
		t.Error("read the nodes of no tree")
	}
	// (A subscription to no tree fails on the server, but the SDK's client
	// sends protocol 2026-07-28's subscriptions/listen without waiting for
	// its answer: nothing here can see that failure.)
}
