package daemon

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// fileFace is what the files scenario needs of a client: both faces'
// clients have it.
type fileFace interface {
	Do(ctx context.Context, req api.Request) (api.Response, error)
	ReadFile(ctx context.Context, tree, node, path string, w interface{ Write([]byte) (int, error) }) (api.FileInfo, error)
	WriteFile(ctx context.Context, tree, node, path string, mode uint32, r interface{ Read([]byte) (int, error) }) (api.FileInfo, error)
}

type lineFiles struct{ *client.Client }

func (f lineFiles) ReadFile(ctx context.Context, tree, node, path string, w interface{ Write([]byte) (int, error) }) (api.FileInfo, error) {
	return f.Client.ReadFile(ctx, tree, node, path, w)
}
func (f lineFiles) WriteFile(ctx context.Context, tree, node, path string, mode uint32, r interface{ Read([]byte) (int, error) }) (api.FileInfo, error) {
	return f.Client.WriteFile(ctx, tree, node, path, mode, r)
}

type httpFiles struct{ *client.HTTPClient }

func (f httpFiles) ReadFile(ctx context.Context, tree, node, path string, w interface{ Write([]byte) (int, error) }) (api.FileInfo, error) {
	return f.HTTPClient.ReadFile(ctx, tree, node, path, w)
}
func (f httpFiles) WriteFile(ctx context.Context, tree, node, path string, mode uint32, r interface{ Read([]byte) (int, error) }) (api.FileInfo, error) {
	return f.HTTPClient.WriteFile(ctx, tree, node, path, mode, r)
}

// TestFilesOverFaces: through the real daemon (a dir tree over FUSE), over
// the socket and over HTTP alike: a file of several chunks written and
// read back whole with its mode, mkdir -p, list, stat, remove -r; no path
// leaves the node (.., an absolute symlink); a suspended node's files are
// read-only (bad_state) but readable; a child's write stays in the child.
func TestFilesOverFaces(t *testing.T) {
	testenv.NeedFUSE(t)
	tg := realTarget(t)
	line := client.New(serveLine(t, tg.Handler))
	defer line.Close()
	hc := client.NewHTTP(serveHTTP(t, tg.Handler), testToken, nil)
	outside := tempDir(t)
	writeFile(t, filepath.Join(outside, "secret"), "host secret")
	for _, tc := range []struct {
		name string
		f    fileFace
	}{{"line", lineFiles{line}}, {"http", httpFiles{hc}}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			f := tc.f
			do := func(req api.Request) (api.Response, error) {
				req.TreeID = tc.name
				return f.Do(ctx, req)
			}
			base := tempDir(t)
			writeFile(t, filepath.Join(base, "a.txt"), "base")
			cr, err := do(api.Request{Op: api.OpTreeCreate, TreeID: tc.name, Base: base})
			if err != nil {
				t.Fatal(err)
			}
			n1 := cr.NodeID
			big := make([]byte, 3*api.MaxInputChunk+17)
			rand.Read(big)
			fi, err := f.WriteFile(ctx, tc.name, n1, "/big.bin", 0o640, bytes.NewReader(big))
			if err != nil || fi.Size != int64(len(big)) || fi.Mode != 0o640 {
				t.Fatalf("write: %+v, %v", fi, err)
			}
			var got bytes.Buffer
			if fi, err := f.ReadFile(ctx, tc.name, n1, "big.bin", &got); err != nil || !bytes.Equal(got.Bytes(), big) || fi.Mode != 0o640 {
				t.Fatalf("read back %d bytes (equal %v), %+v, %v", got.Len(), bytes.Equal(got.Bytes(), big), fi, err)
			}
			// The node's host path shows it: it is the node's file.
			if b, err := os.ReadFile(filepath.Join(cr.Path, "big.bin")); err != nil || !bytes.Equal(b, big) {
				t.Fatalf("the node's path holds %d bytes, %v", len(b), err)
			}
			got.Reset()
			if _, err := f.ReadFile(ctx, tc.name, n1, "a.txt", &got); err != nil || got.String() != "base" {
				t.Fatalf("read a.txt of the base: %q, %v", got.String(), err)
			}
			if _, err := do(api.Request{Op: api.OpFileMkdir, NodeID: n1, Path: "d/e", Parents: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteFile(ctx, tc.name, n1, "d/e/f", 0, bytes.NewReader([]byte("x"))); err != nil {
				t.Fatal(err)
			}
			l, err := do(api.Request{Op: api.OpFileList, NodeID: n1, Path: "d"})
			if err != nil || len(l.Entries) != 1 || l.Entries[0].Name != "e" || !l.Entries[0].IsDir {
				t.Fatalf("list d: %+v, %v", l.Entries, err)
			}
			st, err := do(api.Request{Op: api.OpFileStat, NodeID: n1, Path: "/d/e/f"})
			if err != nil || st.File == nil || st.File.Size != 1 || st.File.Mode != 0o644 {
				t.Fatalf("stat: %+v, %v", st.File, err)
			}
			// Out of the node: .. stays at its top, and an absolute symlink
			// made by the node's own user resolves inside it.
			if err := os.Symlink(outside, filepath.Join(cr.Path, "out")); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{"../../../../" + outside + "/secret", "out/secret"} {
				got.Reset()
				if _, err := f.ReadFile(ctx, tc.name, n1, p, &got); !errors.Is(err, api.ErrNotFound) || got.Len() > 0 {
					t.Errorf("read %s: %q, %v; want not_found", p, got.String(), err)
				}
				if _, err := f.WriteFile(ctx, tc.name, n1, p, 0, bytes.NewReader([]byte("pwned"))); !errors.Is(err, api.ErrNotFound) {
					t.Errorf("write %s: %v; want not_found (its directory is not in the node)", p, err)
				}
			}
			if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "host secret" {
				t.Fatalf("the host file is now %q", b)
			}
			if _, err := do(api.Request{Op: api.OpFileRemove, NodeID: n1, Path: "d"}); !errors.Is(err, api.ErrExists) {
				t.Errorf("remove a full directory: %v, want exists", err)
			}
			if _, err := do(api.Request{Op: api.OpFileRemove, NodeID: n1, Path: "d", Recursive: true}); err != nil {
				t.Fatal(err)
			}
			if _, err := do(api.Request{Op: api.OpFileStat, NodeID: n1, Path: "d"}); !errors.Is(err, api.ErrNotFound) {
				t.Errorf("stat after remove: %v", err)
			}
			// A child's write stays in the child.
			fk, err := f.Do(ctx, api.Request{Op: api.OpTreeFork, TreeID: tc.name, SourceID: n1})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteFile(ctx, tc.name, fk.NodeID, "child.txt", 0, bytes.NewReader([]byte("c"))); err != nil {
				t.Fatal(err)
			}
			if _, err := do(api.Request{Op: api.OpFileStat, NodeID: n1, Path: "child.txt"}); !errors.Is(err, api.ErrNotFound) {
				t.Errorf("the parent sees the child's file: %v", err)
			}
			// Suspended: read-only.
			if _, err := do(api.Request{Op: api.OpTreeSuspend, NodeID: fk.NodeID}); err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteFile(ctx, tc.name, fk.NodeID, "child.txt", 0, bytes.NewReader([]byte("d"))); !errors.Is(err, api.ErrState) {
				t.Errorf("write to a suspended node: %v, want bad_state", err)
			}
			got.Reset()
			if _, err := f.ReadFile(ctx, tc.name, fk.NodeID, "child.txt", &got); err != nil || got.String() != "c" {
				t.Errorf("read a suspended node's file: %q, %v", got.String(), err)
			}
			if _, err := do(api.Request{Op: api.OpFileStat, NodeID: "n99", Path: "x"}); !errors.Is(err, api.ErrNotFound) {
				t.Errorf("an unknown node: %v", err)
			}
		})
	}
}

// TestFilesOwner: the files verbs keep the tree owner rule (another uid's
// tree is forbidden), and a file or directory a requester makes in its own
// tree's node is theirs, not the daemon's.
func TestFilesOwner(t *testing.T) {
	testenv.NeedFUSE(t)
	dir, home, sock := sharedDirs(t)
	theirs, mine := filepath.Join(dir, "theirs"), filepath.Join(dir, "mine")
	for _, p := range []string{theirs, mine} {
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(theirs, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, Config{Home: home, Socket: sock, AllowUIDs: []int{65534}})
	root, nobody := dialAs(t, sock, 0, 0), dialAs(t, sock, 65534, 65534)
	if _, err := ask(t, root, api.Request{Op: api.OpTreeCreate, TreeID: "rootsown", Base: mine}); err != nil {
		t.Fatal(err)
	}
	tr, err := ask(t, nobody, api.Request{Op: api.OpTreeCreate, TreeID: "nobodys", Base: theirs})
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{api.OpFileStat, api.OpFileList, api.OpFileMkdir, api.OpFileRemove} {
		if _, err := ask(t, nobody, api.Request{Op: op, TreeID: "rootsown", NodeID: "n1", Path: "x"}); !errors.Is(err, api.ErrForbidden) {
			t.Errorf("%s on another uid's tree: %v, want forbidden", op, err)
		}
	}
	if _, err := ask(t, nobody, api.Request{Op: api.OpFileWrite, TreeID: "nobodys", NodeID: tr.NodeID, Path: "f", Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := ask(t, nobody, api.Request{Op: api.OpFileMkdir, TreeID: "nobodys", NodeID: tr.NodeID, Path: "d"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"f", "d"} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(tr.Path, name), &st); err != nil || st.Uid != 65534 || st.Gid != 65534 {
			t.Errorf("%s made by uid 65534 is owned by %d:%d (%v)", name, st.Uid, st.Gid, err)
		}
	}
}
