package daemon

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestSocketMode: the socket is 0600 and the home 0700 without an allow-list.
func TestSocketMode(t *testing.T) {
	testenv.NeedFUSE(t)
	home := filepath.Join(tempDir(t), "home")
	startDaemon(t, Config{Home: home})
	for _, c := range []struct {
		path string
		mode fs.FileMode
	}{{filepath.Join(home, "arbord.sock"), 0o600}, {home, 0o700}} {
		fi, err := os.Lstat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != c.mode {
			t.Errorf("%s: mode %v, want %v", c.path, fi.Mode().Perm(), c.mode)
		}
	}
}

// TestHTTPNeedsTokenOffLoopback: the daemon refuses to start (before
// mounting anything) when HTTP would listen off loopback without a token.
func TestHTTPNeedsTokenOffLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0", "192.0.2.1:7878", "example.com:7878"} {
		t.Run(addr, func(t *testing.T) {
			home := filepath.Join(tempDir(t), "home")
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			err := Run(ctx, Config{Home: home, HTTPAddr: addr})
			if err == nil || !strings.Contains(err.Error(), "token") {
				t.Fatalf("Run with HTTP at %s and no token: %v, want a refusal naming the token", addr, err)
			}
			if _, err := os.Stat(filepath.Join(home, "arbord.sock")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("socket created by a refused start: %v", err)
			}
		})
	}
}

// TestShutdownAccess: shutdown works over the socket for the daemon's uid,
// and is refused without a socket peer (as over HTTP).
func TestShutdownAccess(t *testing.T) {
	testenv.NeedFUSE(t)
	r := &router{uid: 0, shutdown: func() { t.Error("shutdown ran without a peer") }}
	if _, err := r.Do(t.Context(), api.Request{Op: api.OpShutdown}); !errors.Is(err, api.ErrAuth) {
		t.Fatalf("shutdown without a socket peer: %v, want ErrAuth", err)
	}
	home := filepath.Join(tempDir(t), "home")
	done := make(chan error, 1)
	ready := make(chan struct{})
	go func() { done <- Run(context.Background(), Config{Home: home, Ready: ready}) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatal(err)
	}
	cl := client.New(filepath.Join(home, "arbord.sock"))
	defer cl.Close()
	resp, err := cl.Do(t.Context(), api.Request{Op: api.OpShutdown})
	if err != nil || resp.Status != "shutting_down" {
		t.Fatalf("shutdown: %+v %v", resp, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after shutdown: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the daemon did not exit within 20s of shutdown")
	}
}

// TestNoEscape: request paths and names cannot make the daemon touch files
// outside its home and the bases it is given. Relative and odd paths are
// bad requests; '../' in node ids, branch names and labels never reaches
// the filesystem (labels are metadata only).
func TestNoEscape(t *testing.T) {
	testenv.NeedFUSE(t)
	dir := tempDir(t)
	home, base, mp := filepath.Join(dir, "home"), filepath.Join(dir, "base"), filepath.Join(dir, "ws")
	treeBase := filepath.Join(dir, "treebase") // one store per base: not the mount's
	writeFile(t, filepath.Join(base, "a.txt"), "a")
	writeFile(t, filepath.Join(treeBase, "a.txt"), "a")
	writeFile(t, filepath.Join(dir, "file"), "not a directory")
	startDaemon(t, Config{Home: home})
	cl := client.New(filepath.Join(home, "arbord.sock"))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	must := mustDo(t, ctx, cl)
	must(api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp})
	tr := must(api.Request{Op: api.OpTreeCreate, Base: treeBase, TreeID: "t"})

	for _, c := range []struct {
		name string
		req  api.Request
		want error
	}{
		{"ws_mount relative base", api.Request{Op: api.OpWsMount, Base: "base", Mountpoint: filepath.Join(dir, "ws2")}, api.ErrBadRequest},
		{"ws_mount relative mountpoint", api.Request{Op: api.OpWsMount, Base: base, Mountpoint: "ws2"}, api.ErrBadRequest},
		{"ws_mount dotted relative", api.Request{Op: api.OpWsMount, Base: "../" + base, Mountpoint: "./ws2"}, api.ErrBadRequest},
		{"ws_mount NUL", api.Request{Op: api.OpWsMount, Base: base + "\x00x", Mountpoint: filepath.Join(dir, "ws2")}, api.ErrBadRequest},
		{"ws_mount base is a file", api.Request{Op: api.OpWsMount, Base: filepath.Join(dir, "file"), Mountpoint: filepath.Join(dir, "ws2")}, api.ErrBadRequest},
		{"ws_mount base inside our mount", api.Request{Op: api.OpWsMount, Base: filepath.Join(mp, "@main"), Mountpoint: filepath.Join(dir, "ws2")}, api.ErrBadRequest},
		{"ws_mount mountpoint inside base", api.Request{Op: api.OpWsMount, Base: base, Mountpoint: filepath.Join(base, "sub")}, api.ErrBadRequest},
		{"ws_create relative mountpoint", api.Request{Op: api.OpWsCreate, Mountpoint: "ws", Branch: "x"}, api.ErrBadRequest},
		{"ws_create ../ name", api.Request{Op: api.OpWsCreate, Mountpoint: mp, Branch: "../../escape"}, api.ErrBadRequest},
		{"ws_create .. name", api.Request{Op: api.OpWsCreate, Mountpoint: mp, Branch: ".."}, api.ErrBadRequest},
		{"ws_create ../ parent", api.Request{Op: api.OpWsCreate, Mountpoint: mp, Branch: "x", Parent: "../main"}, nil},
		{"ws_diff ../ branch", api.Request{Op: api.OpWsDiff, Mountpoint: mp, Branch: "../../etc"}, nil},
		{"ws_abort ../ branch", api.Request{Op: api.OpWsAbort, Mountpoint: mp, Branch: "../main"}, nil},
		{"tree_create base is a file", api.Request{Op: api.OpTreeCreate, Base: filepath.Join(dir, "file")}, api.ErrBadRequest},
		{"tree_create base missing", api.Request{Op: api.OpTreeCreate, Base: filepath.Join(dir, "missing")}, api.ErrBadRequest},
		{"tree_create relative base", api.Request{Op: api.OpTreeCreate, Base: "base"}, api.ErrBadRequest},
		{"tree_create ../ tree id", api.Request{Op: api.OpTreeCreate, Base: base, TreeID: "../escape"}, api.ErrBadRequest},
		{"tree_open ../ tree id", api.Request{Op: api.OpTreeOpen, TreeID: "../../escape"}, api.ErrNotFound},
		{"tree_commit ../ node", api.Request{Op: api.OpTreeCommit, TreeID: "t", NodeID: "../" + tr.Root}, api.ErrNotFound},
		{"tree_prune ../ node", api.Request{Op: api.OpTreePrune, TreeID: "t", NodeID: "../../escape"}, api.ErrNotFound},
		{"tree_fork ../ source", api.Request{Op: api.OpTreeFork, TreeID: "t", SourceID: "../" + tr.Root, Label: "x"}, api.ErrNotFound},
	} {
		_, err := cl.Do(ctx, c.req)
		if c.want == nil {
			// Either refusal is fine; success is not.
			if err == nil || !(errors.Is(err, api.ErrBadRequest) || errors.Is(err, api.ErrNotFound)) {
				t.Errorf("%s: %v, want bad_request or not_found", c.name, err)
			}
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := os.Lstat(filepath.Join(base, "sub")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused mountpoint inside the base was created there: %v", err)
	}
	// Labels are metadata: a fork labelled with a path makes no such path.
	evil := []string{"../../../../escape-label", "/escape-abs", "..", "a/../../escape-mid"}
	r := must(api.Request{Op: api.OpTreeForkBatch, TreeID: "t", SourceID: tr.Root, Labels: evil})
	for i, fk := range r.Forks {
		if fk.Label != evil[i] {
			t.Errorf("fork %d: label %q, want %q", i, fk.Label, evil[i])
		}
		if strings.Contains(fk.Path, "escape") || !strings.HasPrefix(fk.Path, home+"/") {
			t.Errorf("fork %d (label %q): path %s is not under the home, or names the label", i, fk.Label, fk.Path)
		}
		writeFile(t, filepath.Join(fk.Path, "x.txt"), "x")
	}
	n := must(api.Request{Op: api.OpTreeNodes, TreeID: "t"})
	var labels []string
	for _, nd := range n.Nodes {
		labels = append(labels, nd.Label)
	}
	for _, l := range evil {
		if !slices.Contains(labels, l) {
			t.Errorf("label %q not kept as given: %v", l, labels)
		}
	}
	// Nothing named after a label or an id appeared anywhere near.
	for _, root := range []string{filepath.Dir(dir), "/escape-abs", "/escape-label", "/escape-mid"} {
		if root != filepath.Dir(dir) {
			if _, err := os.Lstat(root); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s exists: %v", root, err)
			}
			continue
		}
		ents, _ := os.ReadDir(root)
		for _, e := range ents {
			if strings.Contains(e.Name(), "escape") {
				t.Errorf("%s appeared", filepath.Join(root, e.Name()))
			}
		}
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), "escape") {
			t.Errorf("%s appeared", p)
		}
		return nil
	})
	if b, err := os.ReadFile(filepath.Join(base, "a.txt")); err != nil || string(b) != "a" {
		t.Errorf("base changed: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(base, "x.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("uncommitted node write reached the base: %v", err)
	}
}
