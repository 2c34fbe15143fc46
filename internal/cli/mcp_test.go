package cli

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbor-dev/arbor/internal/daemontest"
)

// TestMCPCommand runs `arbor mcp` with its stdin and stdout on pipes, and
// drives it with the SDK's client: it reaches the running daemon over its
// socket, serves the tools, writes nothing but the protocol on stdout, and
// exits 0 when the client closes stdin.
func TestMCPCommand(t *testing.T) {
	d := daemontest.Start(t, false)
	home, base := d.Home, d.Base
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
