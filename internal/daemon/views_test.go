package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestMountIsAViewOfATree: arbor mount opens the tree of its base and
// shows it; a branch made through the control file is a node of that tree
// (labelled with the branch's name), its verbs are the engine's (events in
// tree_watch, refused by the tree's budget like tree_fork, counted in
// /metrics as face ctl), a tree_create on the mounted base is refused
// naming the tree, and a mount of a tree's base shares that tree.
func TestMountIsAViewOfATree(t *testing.T) {
	testenv.NeedFUSE(t)
	dir := tempDir(t)
	home, base, mp := filepath.Join(dir, "home"), filepath.Join(dir, "base"), filepath.Join(dir, "ws")
	writeFile(t, filepath.Join(base, "f"), "base")
	addr := freeAddr(t)
	startDaemon(t, Config{Home: home, HTTPAddr: addr, Token: testToken})
	cl := client.New(filepath.Join(home, "arbord.sock"))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	must := mustDo(t, ctx, cl)
	// Room for one fork's reserve, not two.
	budget := api.Budget{MaxDiskBytes: engine.NodeDiskReserve * 3 / 2}
	r := must(api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp, Budget: &budget})
	id := r.TreeID
	if id == "" {
		t.Fatalf("ws_mount named no tree: %+v", r)
	}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	events, err := cl.Watch(wctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ctl := filepath.Join(mp, ".branchfs_ctl")
	if err := os.WriteFile(ctl, []byte("create:attempt"), 0); err != nil {
		t.Fatalf("create through the control file: %v", err)
	}
	// The create left the mount on main (BranchFS's rule): the branch is at /@attempt.
	writeFile(t, filepath.Join(mp, "@attempt", "g"), "attempt's")
	nodes := must(api.Request{Op: api.OpTreeNodes, TreeID: id})
	var attempt string
	for _, n := range nodes.Nodes {
		if n.Label == "attempt" {
			attempt = n.ID
		}
	}
	if attempt == "" {
		t.Fatalf("the control file's branch is no node of tree %s: %+v", id, nodes.Nodes)
	}
	// The budget refuses the second fork, through the control file (EDQUOT)
	// and the CLI's verb (budget) alike; nothing changes.
	err = os.WriteFile(ctl, []byte("create:second"), 0)
	if !errors.Is(err, syscall.EDQUOT) {
		t.Errorf("a create through the control file past the disk budget: %v, want EDQUOT", err)
	}
	if _, err := cl.Do(ctx, api.Request{Op: api.OpWsCreate, Mountpoint: mp, Branch: "third"}); !errors.Is(err, api.ErrBudget) {
		t.Errorf("ws_create past the disk budget: %v, want budget", err)
	}
	if n := must(api.Request{Op: api.OpTreeNodes, TreeID: id}); len(n.Nodes) != 2 {
		t.Errorf("after the refused forks the tree has %d nodes, want 2", len(n.Nodes))
	}
	// Commit through the branch's control file: the tree's commit.
	if err := os.WriteFile(filepath.Join(mp, "@attempt", ".branchfs_ctl"), []byte("commit"), 0); err != nil {
		t.Fatalf("commit through the control file: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(base, "g")); err != nil || string(b) != "attempt's" {
		t.Fatalf("after the commit the base has g = %q, %v", b, err)
	}
	var kinds []string
	for len(kinds) < 2 {
		select {
		case ev := <-events:
			kinds = append(kinds, ev.Kind+":"+ev.NodeID)
		case <-time.After(10 * time.Second):
			t.Fatalf("tree_watch showed %v, want the fork and the commit", kinds)
		}
	}
	for _, want := range []string{"fork:" + attempt, "commit:" + attempt} {
		if !slices.Contains(kinds, want) {
			t.Errorf("tree_watch showed %v, want %s among them", kinds, want)
		}
	}
	// The control file's verbs are audited as face ctl, with the caller's uid.
	audit, _ := os.ReadFile(filepath.Join(home, "audit.log"))
	for _, op := range []string{"ws_create", "ws_commit"} {
		if !strings.Contains(string(audit), `"face":"ctl","uid":0`) || !strings.Contains(string(audit), `"op":"`+op+`"`) {
			t.Errorf("the audit log has no ctl line for %s:\n%s", op, audit)
		}
	}
	// ... and counted in /metrics as face ctl.
	for _, sample := range []string{`arbor_requests_total{code="ok",face="ctl",op="ws_create"}`, `arbor_requests_total{code="budget",face="ctl",op="ws_create"}`,
		`arbor_requests_total{code="ok",face="ctl",op="ws_commit"}`} {
		if v, ok := metricValue(t, addr, sample); !ok || v < 1 {
			t.Errorf("/metrics: %s = %v, %v; want at least 1", sample, v, ok)
		}
	}
	// The base is held by the mount's tree.
	if _, err := cl.Do(ctx, api.Request{Op: api.OpTreeCreate, Base: base}); !errors.Is(err, api.ErrExists) || !contains(err, "tree "+id) {
		t.Errorf("tree_create on a mounted base: %v, want exists naming tree %s", err, id)
	}
	// A mount of a tree's base is a view of that tree.
	other := filepath.Join(dir, "other")
	writeFile(t, filepath.Join(other, "f"), "other")
	tr := must(api.Request{Op: api.OpTreeCreate, Base: other, TreeID: "made"})
	f := must(api.Request{Op: api.OpTreeFork, TreeID: tr.TreeID, SourceID: tr.Root, Label: "x"})
	omp := filepath.Join(dir, "omp")
	if r := must(api.Request{Op: api.OpWsMount, Base: other, Mountpoint: omp, Branch: "x"}); r.TreeID != "made" || r.NodeID != f.NodeID {
		t.Fatalf("ws_mount of tree made's base: %+v, want a view of made showing %s", r, f.NodeID)
	}
	writeFile(t, filepath.Join(omp, "h"), "in x")
	if b, err := os.ReadFile(filepath.Join(f.Path, "h")); err != nil || string(b) != "in x" {
		t.Errorf("a write through the view is not in node %s's files: %q, %v", f.NodeID, b, err)
	}
	// /@NAME by label and by id.
	for _, name := range []string{"x", f.NodeID} {
		if b, err := os.ReadFile(filepath.Join(omp, "@"+name, "h")); err != nil || string(b) != "in x" {
			t.Errorf("@%s/h: %q, %v", name, b, err)
		}
	}
	must(api.Request{Op: api.OpWsUnmount, Mountpoint: omp})
	must(api.Request{Op: api.OpWsUnmount, Mountpoint: mp})
}

// TestViewSwitchSurvivesSIGKILL: a switch made through the control file is
// recorded before it answers: after a SIGKILL and a restart the mount shows
// the branch switched to.
func TestViewSwitchSurvivesSIGKILL(t *testing.T) {
	testenv.NeedFUSE(t)
	dir := tempDir(t)
	home, base, mp := filepath.Join(dir, "home"), filepath.Join(dir, "base"), filepath.Join(dir, "ws")
	os.MkdirAll(home, 0o700)
	writeFile(t, filepath.Join(base, "f"), "base")
	p := spawn(t, home, dir)
	cl := client.New(filepath.Join(home, "arbord.sock"))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	must := mustDo(t, ctx, cl)
	must(api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp})
	must(api.Request{Op: api.OpWsCreate, Mountpoint: mp, Branch: "a"})
	writeFile(t, filepath.Join(mp, "f"), "a's")
	ctl := filepath.Join(mp, ".branchfs_ctl")
	if err := os.WriteFile(ctl, []byte("switch:main"), 0); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ctl, []byte("switch:a"), 0); err != nil {
		t.Fatal(err)
	}
	p.kill(t)
	cl.Close()
	unix.Unmount(mp, unix.MNT_DETACH) // the dead mount; the next daemon would detach it too
	spawn(t, home, dir)
	cl2 := client.New(filepath.Join(home, "arbord.sock"))
	defer cl2.Close()
	l, err := cl2.Do(ctx, api.Request{Op: api.OpWsList, Mountpoint: mp})
	if err != nil {
		t.Fatal(err)
	}
	if l.Branch != "a" {
		t.Errorf("after a SIGKILL the mount shows %q, want a (switched to through the control file)", l.Branch)
	}
	if b, err := os.ReadFile(filepath.Join(mp, "f")); err != nil || string(b) != "a's" {
		t.Errorf("after a SIGKILL the mount's f is %q, %v, want a's", b, err)
	}
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

// TestTreeOwners: a tree belongs to the uid that made it. Another admitted
// uid can neither see it in tree_list, nor read its nodes, fork, commit,
// watch it, mount a view of it, drop or delete it; its own trees it can.
func TestTreeOwners(t *testing.T) {
	testenv.NeedFUSE(t)
	dir := tempDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	home, sockDir := filepath.Join(dir, "home"), filepath.Join(dir, "run")
	os.Mkdir(sockDir, 0o755)
	sock := filepath.Join(sockDir, "arbord.sock")
	rootBase, nobodyBase, nobodyMP := filepath.Join(dir, "rootbase"), filepath.Join(dir, "nobodybase"), filepath.Join(dir, "nobodymp")
	writeFile(t, filepath.Join(rootBase, "f"), "root's")
	os.Chmod(rootBase, 0o777) // so that only the owner rule can refuse uid 65534
	for _, p := range []string{nobodyBase, nobodyMP} {
		os.MkdirAll(p, 0o755)
		os.Chown(p, 65534, 65534)
	}
	startDaemon(t, Config{Home: home, Socket: sock, AllowUIDs: []int{65534}})
	root, nobody := dialAs(t, sock, 0, 0), dialAs(t, sock, 65534, 65534)
	rt, err := ask(t, root, api.Request{Op: api.OpTreeCreate, Base: rootBase, TreeID: "roots"})
	if err != nil {
		t.Fatal(err)
	}
	forbidden := func(req api.Request) {
		t.Helper()
		if _, err := ask(t, nobody, req); !errors.Is(err, api.ErrForbidden) || !contains(err, "belongs to uid 0") {
			t.Errorf("uid 65534 %s on root's tree: %v, want forbidden by the owner rule", req.Op, err)
		}
	}
	for _, req := range []api.Request{
		{Op: api.OpTreeNodes, TreeID: "roots"},
		{Op: api.OpTreeFork, TreeID: "roots", SourceID: rt.Root},
		{Op: api.OpTreeProtect, TreeID: "roots", NodeID: rt.Root},
		{Op: api.OpTreeExec, TreeID: "roots", NodeID: rt.Root, Argv: []string{"true"}},
		{Op: api.OpTreeOpen, TreeID: "roots"},
		{Op: api.OpTreeDrop, TreeID: "roots"},
		{Op: api.OpTreeDelete, TreeID: "roots"},
		{Op: api.OpWsMount, Base: rootBase, Mountpoint: nobodyMP},
	} {
		forbidden(req)
	}
	own, err := ask(t, nobody, api.Request{Op: api.OpTreeCreate, Base: nobodyBase})
	if err != nil {
		t.Fatalf("uid 65534 makes a tree on its own base: %v", err)
	}
	if _, err := ask(t, nobody, api.Request{Op: api.OpTreeFork, TreeID: own.TreeID, SourceID: own.Root}); err != nil {
		t.Errorf("uid 65534 forks its own tree: %v", err)
	}
	l, err := ask(t, nobody, api.Request{Op: api.OpTreeList})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Trees) != 1 || l.Trees[0].ID != own.TreeID || l.Trees[0].OwnerUID != 65534 {
		t.Errorf("uid 65534's tree_list: %+v, want only its own tree", l.Trees)
	}
	if l, _ := ask(t, root, api.Request{Op: api.OpTreeList}); len(l.Trees) != 2 {
		t.Errorf("root's tree_list: %+v, want both trees", l.Trees)
	}
	if n, err := ask(t, root, api.Request{Op: api.OpTreeNodes, TreeID: "roots"}); err != nil || len(n.Nodes) != 1 {
		t.Errorf("root's tree after uid 65534's attempts: %+v, %v", n.Nodes, err)
	}
}

// TestRefusalsNameNoHiddenPath: a base or mountpoint given through a
// symlink into a directory the requester cannot search is refused without
// naming what lies behind it (the daemon, root, resolved it once and said
// so in the refusal).
func TestRefusalsNameNoHiddenPath(t *testing.T) {
	testenv.NeedFUSE(t)
	dir := tempDir(t)
	os.Chmod(dir, 0o755)
	home, sockDir := filepath.Join(dir, "home"), filepath.Join(dir, "run")
	os.Mkdir(sockDir, 0o755)
	sock := filepath.Join(sockDir, "arbord.sock")
	hidden := filepath.Join(dir, "hidden")
	os.MkdirAll(filepath.Join(hidden, "secret-name", "m"), 0o755)
	os.Chmod(hidden, 0o700)
	pub := filepath.Join(dir, "pub")
	os.MkdirAll(pub, 0o755)
	link := filepath.Join(pub, "link")
	if err := os.Symlink(filepath.Join(hidden, "secret-name"), link); err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(dir, "own")
	os.MkdirAll(own, 0o755)
	os.Chown(own, 65534, 65534)
	startDaemon(t, Config{Home: home, Socket: sock, AllowUIDs: []int{65534}})
	nobody := dialAs(t, sock, 65534, 65534)
	for _, req := range []api.Request{
		{Op: api.OpTreeCreate, Base: link},
		{Op: api.OpWsMount, Base: link, Mountpoint: filepath.Join(own, "m")},
		{Op: api.OpWsMount, Base: own, Mountpoint: filepath.Join(link, "m")},
	} {
		_, err := ask(t, nobody, req)
		if err == nil {
			t.Errorf("uid 65534 %s base %s mountpoint %s: accepted", req.Op, req.Base, req.Mountpoint)
			continue
		}
		if contains(err, "secret-name") {
			t.Errorf("uid 65534 %s: the refusal names the hidden path: %v", req.Op, err)
		}
	}
}
