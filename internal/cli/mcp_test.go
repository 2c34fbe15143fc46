package cli

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbor-dev/arbor/internal/daemon"
	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestMCPCommand runs `arbor mcp` with its stdin and stdout on pipes, and
// drives it with the SDK's client: it reaches the running daemon over its
// socket, serves the tools, writes nothing but the protocol on stdout, and
// exits 0 when the client closes stdin.
func TestMCPCommand(t *testing.T) {
	testenv.NeedFUSE(t)
	dir, err := os.MkdirTemp("", "arbor-cli-mcp-")
	if err != nil {
		t.Fatal(err)
	}
	home, base := filepath.Join(dir, "home"), filepath.Join(dir, "base")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, daemon.Config{Home: home, Ready: ready}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("daemon: %v", err)
		}
		ms := fusemount.Under(dir)
		for i := len(ms) - 1; i >= 0; i-- {
			fusemount.Detach(ms[i].Point)
		}
		os.RemoveAll(dir)
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	}

	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	var stderr bytes.Buffer
	exit := make(chan int, 1)
	go func() {
		code := Main(context.Background(), []string{"--home", home, "mcp"}, inR, outW, &stderr)
		outW.Close()
		exit <- code
	}()
	c := mcp.NewClient(&mcp.Implementation{Name: "cli-test", Version: "1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatalf("connect: %v (stderr %s)", err, stderr.String())
	}
	if got := cs.InitializeResult().ServerInfo.Name; got != "arbor" {
		t.Errorf("server name %q", got)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "create_tree", Arguments: map[string]any{"base": base, "tree_id": "c1"}})
	if err != nil || res.IsError {
		t.Fatalf("create_tree: %v %+v", err, res)
	}
	res, err = cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "fork", Arguments: map[string]any{"tree_id": "c1", "node_id": "nope"}})
	if err != nil || !res.IsError || res.Meta["arbor.dev/code"] != "not_found" {
		t.Errorf("fork of an unknown node: %v %+v", err, res)
	}
	cs.Close() // closes stdin
	select {
	case code := <-exit:
		if code != 0 {
			t.Errorf("arbor mcp exited %d: %s", code, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("arbor mcp did not exit after its stdin closed")
	}
	if s := stderr.String(); strings.Contains(s, "panic") {
		t.Errorf("stderr: %s", s)
	}
}
