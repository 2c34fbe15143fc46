package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rogpeppe/go-internal/testscript"

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

// cmdMCPAgent launches `arbor mcp` as an MCP client launches its tools (a
// child process on stdin and stdout, the script's environment) and runs a
// short agent against it: create tree TREE over BASE, fork two, write
// agent.txt in each, commit the first, see the second stale. With no daemon running, arbor mcp
// starts one. mcpagent TREE BASE.
func cmdMCPAgent(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 || neg {
		ts.Fatalf("usage: mcpagent TREE BASE")
	}
	var arbor string
	for _, dir := range filepath.SplitList(ts.Getenv("PATH")) {
		if p := filepath.Join(dir, "arbor"); fileExists(p) {
			arbor = p
			break
		}
	}
	if arbor == "" {
		ts.Fatalf("no arbor on the script's PATH")
	}
	cmd := exec.Command(arbor, "mcp")
	cmd.Env = append(os.Environ(), "ARBOR_HOME="+ts.Getenv("ARBOR_HOME"), "PATH="+ts.Getenv("PATH"))
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "mcpagent", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	ts.Check(err)
	defer cs.Close()
	call := func(name string, in map[string]any) map[string]any {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: in})
		ts.Check(err)
		if res.IsError {
			ts.Fatalf("%s: %v", name, res.Content[0].(*mcp.TextContent).Text)
		}
		out, _ := res.StructuredContent.(map[string]any)
		return out
	}
	tree := call("create_tree", map[string]any{"tree_id": args[0], "base": ts.MkAbs(args[1])})
	forks := call("fork", map[string]any{"tree_id": args[0], "node_id": tree["root"], "labels": []string{"a", "b"}})["forks"].([]any)
	for _, f := range forks { // write in each, through its path
		f := f.(map[string]any)
		ts.Check(os.WriteFile(filepath.Join(f["path"].(string), "agent.txt"), []byte(f["label"].(string)+"\n"), 0o644))
	}
	a, b := forks[0].(map[string]any)["node_id"], forks[1].(map[string]any)["node_id"]
	stale := call("commit", map[string]any{"tree_id": args[0], "node_id": a})["stale"].([]any)
	if len(stale) != 1 || stale[0] != b {
		ts.Fatalf("commit of %v: stale %v, want [%v]", a, stale, b)
	}
	fmt.Fprintf(ts.Stdout(), "committed %v, stale %v\n", a, b)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
