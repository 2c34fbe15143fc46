package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// execOn runs sh -c script in a node over c (a connection of dialAs) and
// returns its output and exit.
func execOn(t *testing.T, c net.Conn, tree, node, script string) (string, api.ExecExit, error) {
	t.Helper()
	b, _ := json.Marshal(api.Request{Op: api.OpTreeExec, TreeID: tree, NodeID: node, Argv: []string{"sh", "-c", script}})
	c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write(append(b, '\n')); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	var out bytes.Buffer
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("tree_exec: reading the reply: %v", err)
		}
		var r api.Response
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		switch {
		case r.Status == api.StatusExecOutput && r.Output != nil:
			out.Write(r.Output.Data)
		case r.Status == api.StatusExecExit && r.Exit != nil:
			return out.String(), *r.Exit, nil
		case r.Status == api.StatusError:
			return out.String(), api.ExecExit{}, &api.Error{Code: r.Code, Message: r.Message}
		default:
			t.Fatalf("tree_exec: reply %q", r.Status)
		}
	}
}

// nobodyJailDaemon starts a daemon that admits uid 65534, and returns a
// connection as uid 65534 and a base directory it owns.
func nobodyJailDaemon(t *testing.T, cfg Config) (nobody net.Conn, base string) {
	needJail(t)
	dir := tempDir(t)
	os.Chmod(dir, 0o755)
	home, sockDir := filepath.Join(dir, "home"), filepath.Join(dir, "run")
	os.Mkdir(sockDir, 0o755)
	base = filepath.Join(dir, "nobodybase")
	os.Mkdir(base, 0o755)
	os.Chown(base, 65534, 65534)
	cfg.Home, cfg.Socket, cfg.AllowUIDs = home, filepath.Join(sockDir, "arbord.sock"), []int{65534}
	startDaemon(t, cfg)
	nobody = dialAs(t, cfg.Socket, 65534, 65534)
	t.Cleanup(func() { nobody.Close() })
	return nobody, base
}

// TestAttackJailNonRootOwner: uid 65534, admitted on the socket, asks for
// a jail tree on its own directory. A sandbox's processes run as root
// inside it, so such a tree would read /etc/shadow through the host's /etc
// and carry a root-owned setuid shell into uid 65534's base at a commit (a
// root shell on the host; both happened before the rule): it is refused,
// with outbound network too, and uid 65534 keeps its files-only trees.
func TestAttackJailNonRootOwner(t *testing.T) {
	nobody, base := nobodyJailDaemon(t, Config{})
	for _, network := range []string{"", api.NetworkOutbound} {
		tr, err := ask(t, nobody, api.Request{Op: api.OpTreeCreate, TreeID: "nj", Base: base, Backend: "jail", Network: network})
		if errors.Is(err, api.ErrForbidden) && contains(err, "only root may own") {
			continue
		}
		if err != nil {
			t.Fatalf("uid 65534's jail tree (network %q): %v, want forbidden", network, err)
		}
		out, x, err := execOn(t, nobody, "nj", tr.Root, "head -c 40 /etc/shadow; cp /bin/sh /workspace/rootsh && chmod 4755 /workspace/rootsh")
		t.Errorf("uid 65534 made a jail tree (network %q) and ran in it: %q %+v %v", network, out, x, err)
		ch, err := ask(t, nobody, api.Request{Op: api.OpTreeFork, TreeID: "nj", SourceID: tr.Root})
		if err == nil {
			ask(t, nobody, api.Request{Op: api.OpTreeCommit, TreeID: "nj", NodeID: ch.NodeID})
		}
		if st, err := os.Lstat(filepath.Join(base, "rootsh")); err == nil {
			t.Errorf("a commit left %v rootsh in uid 65534's base", st.Mode())
		}
		ask(t, nobody, api.Request{Op: api.OpTreeDelete, TreeID: "nj"})
	}
	if _, err := ask(t, nobody, api.Request{Op: api.OpTreeCreate, TreeID: "nd", Base: base}); err != nil {
		t.Errorf("uid 65534's files-only tree: %v", err)
	}
}

// TestAttackOutboundToDaemon: a sandbox with outbound network reaches the
// host's loopback through pasta's gateway, arbord's HTTP face among it.
// Without the token it gets nothing there: every route that carries data
// (trees, metrics, MCP) answers 401, and a tree_create through it is not
// done; what the sandbox can reach is no more than any local process.
func TestAttackOutboundToDaemon(t *testing.T) {
	needJail(t)
	testenv.NeedCommand(t, testenv.Pasta, "pasta")
	testenv.NeedCommand(t, testenv.Root, "curl")
	gw := testenv.HostGateway(t)
	dir := tempDir(t)
	sock, addr := filepath.Join(dir, "arbord.sock"), freeAddr(t)
	startDaemon(t, Config{Home: filepath.Join(dir, "home"), Socket: sock, HTTPAddr: addr, Token: "attack-test-token-0123456789"})
	_, port, _ := net.SplitHostPort(addr)
	c := client.New(sock)
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	must := mustDo(t, ctx, c)
	base := tempDir(t)
	tr := must(api.Request{Op: api.OpTreeCreate, TreeID: "net", Base: base, Backend: "jail", Network: api.NetworkOutbound})
	url := "http://" + net.JoinHostPort(gw, port)
	// The face is there: /healthz answers (no data).
	if out, x, err := shIn(ctx, c, "net", tr.Root, "curl -s -o /dev/null -w '%{http_code}' "+url+"/healthz"); err != nil || x.ExitCode != 0 || out != "200" {
		t.Fatalf("the sandbox does not reach arbord's HTTP face (so this test shows nothing): %q %+v %v", out, x, err)
	}
	for _, probe := range []string{
		"curl -s -o /dev/null -w '%{http_code}' " + url + "/metrics",
		"curl -s -o /dev/null -w '%{http_code}' " + url + "/v1/trees",
		"curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer wrong' " + url + "/v1/trees",
		"curl -s -o /dev/null -w '%{http_code}' -X POST -d '{\"base\":\"/\",\"tree_id\":\"evil\"}' " + url + "/v1/trees",
		"curl -s -o /dev/null -w '%{http_code}' -X POST -d '{}' " + url + "/mcp",
	} {
		out, x, err := shIn(ctx, c, "net", tr.Root, probe)
		if err != nil || x.ExitCode != 0 || out != "401" {
			t.Errorf("%s from the sandbox: %q %+v %v, want 401", probe, out, x, err)
		}
	}
	if l := must(api.Request{Op: api.OpTreeList}); len(l.Trees) != 1 {
		t.Errorf("trees after the sandbox's tries: %+v", l.Trees)
	}
}

// TestAttackImagesNonRoot: image names are every owner's and a build runs
// mmdebstrap as root. uid 65534, admitted on the socket, may not build an
// image (which could replace root's under its name, or fill the disk) nor
// remove one; it lists them.
func TestAttackImagesNonRoot(t *testing.T) {
	testenv.NeedFUSE(t)
	dir := tempDir(t)
	os.Chmod(dir, 0o755)
	sock := filepath.Join(dir, "run", "arbord.sock")
	os.Mkdir(filepath.Dir(sock), 0o755)
	startDaemon(t, Config{Home: filepath.Join(dir, "home"), Socket: sock, AllowUIDs: []int{65534}})
	nobody := dialAs(t, sock, 65534, 65534)
	defer nobody.Close()
	for _, req := range []api.Request{
		{Op: api.OpImageBuild, Image: "base", Packages: []string{"hello"}},
		{Op: api.OpImageRm, Image: "base"},
	} {
		if _, err := ask(t, nobody, req); !errors.Is(err, api.ErrForbidden) {
			t.Errorf("uid 65534's %s: %v, want forbidden", req.Op, err)
		}
	}
	if l, err := ask(t, nobody, api.Request{Op: api.OpImageList}); err != nil || l.Status != "image_list" {
		t.Errorf("uid 65534's image_list: %+v %v", l, err)
	}
	root := dialAs(t, sock, 0, 0)
	defer root.Close()
	if _, err := ask(t, root, api.Request{Op: api.OpImageRm, Image: "base"}); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("root's image_rm of no image: %v, want not found", err)
	}
}
