package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/daemon"
	"github.com/arbor-dev/arbor/internal/daemontest"
	"github.com/arbor-dev/arbor/internal/jail"
	"github.com/arbor-dev/arbor/internal/jailbackend"
	"github.com/arbor-dev/arbor/internal/mcpserver"
)

const token = daemontest.Token

func TestMain(m *testing.M) {
	jail.Main() // a sandbox's init is a re-exec of this binary
	os.Exit(m.Run())
}

func startDaemon(t *testing.T) daemontest.Daemon { return daemontest.Start(t, true) }

// bearer adds the token to every request.
type bearer struct{ rt http.RoundTripper }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+token)
	return b.rt.RoundTrip(r)
}

// transports are the two ways an agent reaches the server.
var transports = []struct {
	name    string
	connect func(t *testing.T, d daemontest.Daemon, c *mcp.Client, o *mcp.ClientSessionOptions) *mcp.ClientSession
}{
	{"stdio", func(t *testing.T, d daemontest.Daemon, c *mcp.Client, o *mcp.ClientSessionOptions) *mcp.ClientSession {
		// What `arbor mcp` runs: the server in its own process, over the
		// daemon's socket, on a pipe for stdio.
		cl := client.New(d.Socket)
		t.Cleanup(func() { cl.Close() })
		return pipe(t, mcpserver.Config{Handler: mcpserver.Socket{Client: cl}, Version: "test"}, c, o)
	}},
	{"http", func(t *testing.T, d daemontest.Daemon, c *mcp.Client, o *mcp.ClientSessionOptions) *mcp.ClientSession {
		hc := &http.Client{Transport: bearer{http.DefaultTransport}}
		cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: d.URL + "/mcp", HTTPClient: hc}, o)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}},
}

// agent calls tools the way a scripted agent would.
type agent struct {
	t  *testing.T
	cs *mcp.ClientSession
}

// call calls a tool that must succeed and decodes its structured output.
func (a agent) call(name string, args any, out any) {
	a.t.Helper()
	res, err := a.cs.CallTool(a.t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		a.t.Fatalf("%s: protocol error: %v", name, err)
	}
	if res.IsError {
		a.t.Fatalf("%s: tool error: %s", name, text(res))
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			a.t.Fatalf("%s: output %s: %v", name, b, err)
		}
	}
}

// fail calls a tool that must fail with a tool error of code.
func (a agent) fail(name string, args any, code string) string {
	a.t.Helper()
	res, err := a.cs.CallTool(a.t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		a.t.Fatalf("%s: a protocol error, want a tool error %s: %v", name, code, err)
	}
	msg := text(res)
	if !res.IsError {
		a.t.Fatalf("%s: succeeded (%s), want the tool error %s", name, msg, code)
	}
	if got := res.Meta[mcpserver.MetaCode]; got != code {
		a.t.Errorf("%s: _meta code %v, want %s (%s)", name, got, code, msg)
	}
	if !strings.HasPrefix(msg, code+": ") {
		a.t.Errorf("%s: error text %q does not start with %q", name, msg, code+": ")
	}
	return msg
}

func text(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// TestScriptedAgent is the agent over both transports against a
// real daemon: it forks three branches, writes in each, commits one, sees
// the others stale (by the commit's reply, the nodes tool and the
// subscribed resource), and meets our codes as tool errors.
func TestScriptedAgent(t *testing.T) {
	d := startDaemon(t)
	i := 0
	for _, tr := range transports {
		// The newest protocol, and the one most clients speak today (its
		// subscriptions are resources/subscribe, not a listen stream).
		for _, version := range []string{"", "2025-06-18"} {
			i++
			name := tr.name
			if version != "" {
				name += "-" + version
			}
			t.Run(name, func(t *testing.T) {
				scriptedAgent(t, d, i, name, func(c *mcp.Client) *mcp.ClientSession {
					return tr.connect(t, d, c, &mcp.ClientSessionOptions{ProtocolVersion: version})
				})
			})
		}
	}
	// /mcp's tool calls are counted as the face "mcp" (stdio's reach the
	// daemon by its socket, counted as "line").
	req, _ := http.NewRequest("GET", d.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, want := range []string{`arbor_requests_total{code="stale",face="mcp",op="tree_commit"} 2`, `arbor_requests_total{code="ok",face="mcp",op="tree_fork_batch"} 2`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// scriptedAgent is the agent of TestScriptedAgent over one connection.
func scriptedAgent(t *testing.T, d daemontest.Daemon, i int, name string, connect func(*mcp.Client) *mcp.ClientSession) {
	updated := make(chan string, 64)
	c := mcp.NewClient(&mcp.Implementation{Name: "scripted-agent", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			updated <- r.Params.URI
		},
	})
	cs := connect(c)
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v == "" {
		t.Fatal("no protocol version negotiated")
	}
	a := agent{t, cs}

	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if tl.Description == "" || tl.InputSchema == nil || tl.OutputSchema == nil {
			t.Errorf("tool %s: description, input or output schema missing", tl.Name)
		}
	}
	for _, want := range []string{"create_tree", "list_trees", "nodes", "fork", "commit", "abort", "rollback", "protect", "unprotect", "prune", "suspend", "resume", "diff", "exec", "read_file", "write_file", "list_files"} {
		if !slices.Contains(names, want) {
			t.Errorf("no tool %s (have %v)", want, names)
		}
	}

	// A tree per transport: one store per base, so each its own base.
	base := filepath.Join(d.Base, name)
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	var tree mcpserver.CreateTreeOut
	a.call("create_tree", map[string]any{"base": base, "tree_id": fmt.Sprintf("agent%d", i), "max_live_nodes": 16}, &tree)
	if tree.Root == "" {
		t.Fatalf("create_tree gave no root: %+v", tree)
	}
	uri := mcpserver.NodesURI(tree.TreeID)
	if err := cs.Subscribe(t.Context(), &mcp.SubscribeParams{URI: uri}); err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	// Protocol 2026-07-28's subscription is made as the server reads
	// it, after Subscribe returns: protect the root until an update
	// says it holds.
	rootArgs := map[string]any{"tree_id": tree.TreeID, "node_id": tree.Root}
	for deadline := time.Now().Add(10 * time.Second); ; {
		a.call("protect", rootArgs, nil)
		a.call("unprotect", rootArgs, nil)
		if waitUpdateFor(updated, uri, 100*time.Millisecond) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the subscription gave no update within 10s")
		}
	}
	time.Sleep(50 * time.Millisecond)
	for len(updated) > 0 {
		<-updated
	}

	var fork mcpserver.ForkOut
	a.call("fork", map[string]any{"tree_id": tree.TreeID, "node_id": tree.Root, "labels": []string{"retry", "rewrite", "skip"}}, &fork)
	if len(fork.Forks) != 3 {
		t.Fatalf("fork made %d children, want 3: %+v", len(fork.Forks), fork)
	}
	waitUpdate(t, updated, uri)
	for _, f := range fork.Forks {
		if f.Path == "" {
			t.Fatalf("fork %s has no path", f.NodeID)
		}
		// Write in each branch through its path (the dir backend's files).
		if err := os.WriteFile(filepath.Join(f.Path, "strategy.txt"), []byte(f.Label+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	winner, losers := fork.Forks[1], []string{fork.Forks[0].NodeID, fork.Forks[2].NodeID}
	// diff (tree_diff) shows the winner's change with its text diff.
	var diff mcpserver.DiffOut
	a.call("diff", map[string]any{"tree_id": tree.TreeID, "node_id": winner.NodeID}, &diff)
	if len(diff.Changes) != 1 || diff.Changes[0].Kind != "added" || diff.Changes[0].Path != "strategy.txt" ||
		!strings.Contains(diff.Changes[0].Diff, "\n+rewrite\n") {
		t.Errorf("diff of %s: %+v", winner.NodeID, diff)
	}
	a.fail("diff", rootArgs, api.CodeBadRequest) // the root has no fork point
	var commit mcpserver.CommitOut
	a.call("commit", map[string]any{"tree_id": tree.TreeID, "node_id": winner.NodeID}, &commit)
	if commit.Parent != tree.Root {
		t.Errorf("commit went into %s, want the root %s", commit.Parent, tree.Root)
	}
	slices.Sort(commit.Stale)
	slices.Sort(losers)
	if !slices.Equal(commit.Stale, losers) {
		t.Errorf("stale after the commit: %v, want %v", commit.Stale, losers)
	}
	if b, err := os.ReadFile(filepath.Join(base, "strategy.txt")); err != nil || string(b) != "rewrite\n" {
		t.Errorf("base after the commit: %q, %v; want the winner's file", b, err)
	}
	waitUpdate(t, updated, uri)

	var nodes mcpserver.NodesOut
	a.call("nodes", map[string]any{"tree_id": tree.TreeID}, &nodes)
	states := map[string]string{}
	for _, n := range nodes.Nodes {
		states[n.ID] = n.State
	}
	for _, id := range losers {
		if states[id] != api.StateStale {
			t.Errorf("node %s is %q, want stale (nodes: %v)", id, states[id], states)
		}
	}
	if nodes.Budget.MaxLiveNodes != 16 || nodes.Usage.TotalNodes != len(nodes.Nodes) {
		t.Errorf("usage %+v budget %+v for %d nodes", nodes.Usage, nodes.Budget, len(nodes.Nodes))
	}
	// The resource says the same.
	rr, err := cs.ReadResource(t.Context(), &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		t.Fatal(err)
	}
	var res mcpserver.NodesOut
	if err := json.Unmarshal([]byte(rr.Contents[0].Text), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Nodes) != len(nodes.Nodes) {
		t.Errorf("resource has %d nodes, the tool %d", len(res.Nodes), len(nodes.Nodes))
	}

	// Our codes, as tool errors.
	a.fail("commit", map[string]any{"tree_id": tree.TreeID, "node_id": losers[0]}, api.CodeStale)
	a.fail("nodes", map[string]any{"tree_id": "no-such-tree"}, api.CodeNotFound)
	a.fail("fork", map[string]any{"tree_id": tree.TreeID, "node_id": tree.Root, "count": 40}, api.CodeBudget)
	a.fail("fork", map[string]any{"tree_id": tree.TreeID, "node_id": tree.Root, "count": -1}, api.CodeBadRequest)
	a.fail("fork", map[string]any{"node_id": tree.Root}, api.CodeBadRequest) // tree_id missing: the schema refuses it
	a.fail("protect", map[string]any{"tree_id": tree.TreeID, "node_id": losers[1]}, api.CodeState)
	var keep mcpserver.ForkOut
	a.call("fork", map[string]any{"tree_id": tree.TreeID, "node_id": tree.Root, "count": 1}, &keep)
	kept := map[string]any{"tree_id": tree.TreeID, "node_id": keep.Forks[0].NodeID}
	a.call("protect", kept, nil)
	a.fail("prune", kept, api.CodeProtected)
	a.call("unprotect", kept, nil)
	a.call("suspend", kept, nil)
	var resumed mcpserver.DoneOut
	a.call("resume", kept, &resumed)
	if resumed.Path == "" {
		t.Errorf("resume gave no path: %+v", resumed)
	}
	var again mcpserver.ForkOut
	a.call("rollback", map[string]any{"tree_id": tree.TreeID, "node_id": tree.Root, "label": "again"}, &again)
	if len(again.Forks) != 1 || again.Forks[0].Label != "again" {
		t.Errorf("rollback: %+v", again)
	}
	a.call("prune", kept, nil)
	for _, id := range losers {
		a.call("abort", map[string]any{"tree_id": tree.TreeID, "node_id": id}, nil)
	}
	// The files tools on the dir tree's root (the commit wrote
	// strategy.txt); exec needs a sandbox backend.
	root := map[string]any{"tree_id": tree.TreeID, "node_id": tree.Root}
	with := func(m map[string]any, kv ...any) map[string]any {
		out := map[string]any{}
		for k, v := range m {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = kv[i+1]
		}
		return out
	}
	var rf mcpserver.ReadFileOut
	a.call("read_file", with(root, "path", "strategy.txt"), &rf)
	if rf.Content != "rewrite\n" || rf.Size != 8 || rf.Truncated {
		t.Errorf("read_file strategy.txt: %+v", rf)
	}
	a.call("write_file", with(root, "path", "notes/todo.md", "content", "- ship\n"), nil)
	var ls mcpserver.ListFilesOut
	a.call("list_files", with(root, "path", "notes"), &ls)
	if len(ls.Entries) != 1 || ls.Entries[0].Name != "todo.md" || ls.Entries[0].Size != 7 {
		t.Errorf("list_files notes: %+v", ls)
	}
	a.fail("read_file", with(root, "path", "../../../etc/passwd"), api.CodeNotFound)
	a.fail("exec", with(root, "argv", []string{"true"}), mcpserver.CodeNotSupported)
	if jailbackend.Available() == nil {
		jailAgent(t, a, d, name, i, with)
	}
	var trees mcpserver.TreesOut
	a.call("list_trees", map[string]any{}, &trees)
	if !slices.ContainsFunc(trees.Trees, func(tr api.Tree) bool { return tr.ID == tree.TreeID }) {
		t.Errorf("list_trees lacks %s: %+v", tree.TreeID, trees)
	}
	if err := cs.Unsubscribe(t.Context(), &mcp.UnsubscribeParams{URI: uri}); err != nil {
		t.Errorf("unsubscribe: %v", err)
	}
}

// jailAgent is the agent on a jail tree: it writes a script in a child
// node, runs it there (its output in the node's /tmp), and reads and lists
// what it made.
func jailAgent(t *testing.T, a agent, d daemontest.Daemon, name string, i int, with func(map[string]any, ...any) map[string]any) {
	base := filepath.Join(d.Base, name+"-jail")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	var tree mcpserver.CreateTreeOut
	a.call("create_tree", map[string]any{"base": base, "tree_id": fmt.Sprintf("jail%d", i), "backend": "jail"}, &tree)
	var fork mcpserver.ForkOut
	a.call("fork", map[string]any{"tree_id": tree.TreeID, "node_id": tree.Root, "labels": []string{"try"}}, &fork)
	child := map[string]any{"tree_id": tree.TreeID, "node_id": fork.Forks[0].NodeID}
	a.call("write_file", with(child, "path", "src/run.sh", "content", "echo \"hello $1\" | tee /tmp/out; echo warn >&2; exit 3\n"), nil)
	var x mcpserver.ExecOut
	a.call("exec", with(child, "argv", []string{"sh", "run.sh", "agent"}, "cwd", "/workspace/src"), &x)
	if x.Stdout != "hello agent\n" || x.Stderr != "warn\n" || x.ExitCode != 3 {
		t.Errorf("exec in a jail node: %+v", x)
	}
	a.call("exec", with(child, "argv", []string{"cat"}, "stdin", "piped"), &x)
	if x.Stdout != "piped" {
		t.Errorf("exec with stdin: %+v", x)
	}
	a.call("exec", with(child, "argv", []string{"sleep", "5"}, "timeout_seconds", 1), &x)
	if x.Signal != "KILL" {
		t.Errorf("exec past its timeout: %+v", x)
	}
	var rf mcpserver.ReadFileOut
	a.call("read_file", with(child, "path", "/tmp/out"), &rf)
	if rf.Content != "hello agent\n" {
		t.Errorf("read_file /tmp/out: %+v", rf)
	}
	var ls mcpserver.ListFilesOut
	a.call("list_files", with(child, "path", "/workspace/src"), &ls)
	if len(ls.Entries) != 1 || ls.Entries[0].Name != "run.sh" {
		t.Errorf("list_files /workspace/src: %+v", ls)
	}
	a.call("abort", child, nil)
}

// waitUpdate waits for a resources/updated of uri and drains the rest of
// its burst.
func waitUpdate(t *testing.T, updated <-chan string, uri string) {
	t.Helper()
	if !waitUpdateFor(updated, uri, 10*time.Second) {
		t.Fatalf("no resources/updated for %s within 10s", uri)
	}
}

func waitUpdateFor(updated <-chan string, uri string, d time.Duration) bool {
	timeout := time.After(d)
	for {
		select {
		case got := <-updated:
			if got == uri {
				for len(updated) > 0 {
					<-updated
				}
				return true
			}
		case <-timeout:
			return false
		}
	}
}

// TestHTTPNeedsToken: /mcp is behind the HTTP face's token.
func TestHTTPNeedsToken(t *testing.T) {
	d := startDaemon(t)
	c := mcp.NewClient(&mcp.Implementation{Name: "no-token", Version: "1"}, nil)
	_, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: d.URL + "/mcp", MaxRetries: -1}, nil)
	if err == nil {
		t.Fatal("connected to /mcp without the token")
	}
	res, err := http.Post(d.URL+"/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST /mcp without the token: %s, want 401", res.Status)
	}
	audit, err := os.ReadFile(filepath.Join(d.Home, "audit.log"))
	if err != nil || !strings.Contains(string(audit), `"path":"/mcp"`) {
		t.Errorf("the audit log has no /mcp line: %v\n%s", err, audit)
	}
}

// TestStopWithOpenSession: an MCP client's open session does not hold the
// daemon's stop for the HTTP face's shutdown timeout (5 s): it stopped in
// 5 s before /mcp's requests ended with the server, 5 ms after.
func TestStopWithOpenSession(t *testing.T) {
	dir, err := os.MkdirTemp("", "arbor-mcp-stop-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- daemon.Run(ctx, daemon.Config{Home: filepath.Join(dir, "home"), HTTPAddr: addr, Token: token, Ready: ready})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("daemon: %v", err)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "lingering", Version: "1"}, nil)
	tr := &http.Transport{}
	var cs *mcp.ClientSession
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		cs, err = c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: "http://" + addr + "/mcp", HTTPClient: &http.Client{Transport: bearer{tr}}, MaxRetries: -1}, nil)
		if err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(t.Context(), nil); err != nil {
		t.Fatal(err)
	}
	// A connection the client dialed but sent nothing on holds Go's
	// Shutdown for 5 s whatever it serves (http.Server counts a new
	// connection idle only from 5 s old): close the spare ones, so what is
	// measured is the session's open streams.
	tr.CloseIdleConnections()
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("daemon: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not stop within 30s")
	}
	if d := time.Since(start); d >= 3*time.Second {
		t.Errorf("the daemon took %v to stop with an MCP session open (its HTTP face's shutdown timeout is 5 s)", d)
	}
}
