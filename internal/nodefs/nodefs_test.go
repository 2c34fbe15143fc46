package nodefs_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/nodefs"
)

// layout makes a node's two roots and, beside them, a host file that no
// path of the node may reach.
func layout(t *testing.T) (fs *nodefs.FS, files, tmp, outside string) {
	t.Helper()
	d := t.TempDir()
	files, tmp, outside = filepath.Join(d, "files"), filepath.Join(d, "tmp"), filepath.Join(d, "outside")
	for _, dir := range []string{files, tmp, outside} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs, err := nodefs.New(nodefs.Root{Prefix: "/workspace", Dir: files}, nodefs.Root{Prefix: "/tmp", Dir: tmp})
	if err != nil {
		t.Fatal(err)
	}
	return fs, files, tmp, outside
}

func read(t *testing.T, fs *nodefs.FS, p string) (string, error) {
	t.Helper()
	r, _, err := fs.Open(context.Background(), p)
	if err != nil {
		return "", err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return string(b), err
}

// TestEscapes: "..", absolute and relative symlinks, a symlinked
// directory, /proc's magic links and a symlink at the target of a write
// all stay inside the node: the host file beside it is never read,
// written, removed, nor a directory made beside it.
func TestEscapes(t *testing.T) {
	ctx := context.Background()
	fs, files, _, outside := layout(t)
	secret := filepath.Join(outside, "secret")
	links := map[string]string{
		"abs":    secret,              // absolute: resolved as if files were /
		"rel":    "../outside/secret", // climbs past the root
		"deep":   "a/../../../../outside/secret",
		"dirabs": outside, // a directory out
		"dirrel": "../outside",
		"root":   "/",
		"proc":   "/proc/self/root" + secret, // a magic link on the way
		"procfd": "/proc/self/cwd",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(files, name)); err != nil {
			t.Fatal(err)
		}
	}
	paths := []string{
		"../outside/secret", "/../outside/secret", "/workspace/../../outside/secret", "/tmp/../../outside/secret",
		"abs", "rel", "deep", "dirabs/secret", "dirrel/secret", "root" + secret, "root/../outside/secret",
		"proc", "procfd/secret", secret,
	}
	for _, p := range paths {
		if got, err := read(t, fs, p); err == nil && strings.Contains(got, "host secret") {
			t.Errorf("read %s reached the host file", p)
		}
		if _, err := fs.Write(ctx, p, 0o644, strings.NewReader("pwned")); err == nil {
			// It may succeed, but inside the node only.
			t.Logf("write %s: made inside the node", p)
		}
		if _, err := fs.Mkdir(ctx, p+"-dir", 0, true); err == nil {
			t.Logf("mkdir %s-dir: made inside the node", p)
		}
		fs.Remove(ctx, p, true)
	}
	b, err := os.ReadFile(secret)
	if err != nil || string(b) != "host secret" {
		t.Fatalf("the host file is now %q, %v", b, err)
	}
	ents, _ := os.ReadDir(outside)
	if len(ents) != 1 {
		t.Errorf("the directory beside the node holds %d entries, want 1 (secret)", len(ents))
	}
	// A write through an absolute symlink lands inside the node, where
	// the link points when the node's files are /.
	os.Symlink(filepath.Join("/", "inner"), filepath.Join(files, "toinner"))
	os.Mkdir(filepath.Join(files, "inner"), 0o755)
	if _, err := fs.Write(ctx, "toinner/f", 0, strings.NewReader("in")); err != nil {
		t.Fatalf("write through a symlink inside: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(files, "inner", "f")); err != nil || string(b) != "in" {
		t.Errorf("inner/f = %q, %v", b, err)
	}
}

// TestFiles: write (atomic, with mode), read, stat, list, mkdir, remove,
// over the two roots of a jail node.
func TestFiles(t *testing.T) {
	ctx := context.Background()
	fs, files, tmp, _ := layout(t)
	fi, err := fs.Write(ctx, "/workspace/a.txt", 0o600, strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size != 5 || fi.Mode != 0o600 || fi.Type != api.FileRegular || fi.Path != "/workspace/a.txt" {
		t.Errorf("write: %+v", fi)
	}
	if got, err := read(t, fs, "a.txt"); got != "hello" || err != nil {
		t.Errorf("read a.txt (relative: the files) = %q, %v", got, err)
	}
	if got, _ := read(t, fs, "/a.txt"); got != "hello" {
		t.Errorf("read /a.txt = %q: a path under no root's prefix is in the files", got)
	}
	if _, err := fs.Write(ctx, "/tmp/t", 0, strings.NewReader("tmp")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(tmp, "t")); string(b) != "tmp" {
		t.Errorf("/tmp/t went elsewhere: tmp/t = %q", b)
	}
	// A failed source leaves the old file whole, and no temporary.
	_, err = fs.Write(ctx, "a.txt", 0, io.MultiReader(strings.NewReader("partial"), iotest.ErrReader(errors.New("cut"))))
	if err == nil {
		t.Fatal("write from a failing reader succeeded")
	}
	if got, _ := read(t, fs, "a.txt"); got != "hello" {
		t.Errorf("after a failed write a.txt = %q", got)
	}
	if ents, _ := os.ReadDir(files); len(ents) != 1 {
		t.Errorf("files holds %d entries after a failed write, want 1", len(ents))
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	if _, err := fs.Write(ctx, "d/big", 0, bytes.NewReader(big)); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("write into a missing directory: %v, want not found", err)
	}
	if _, err := fs.Mkdir(ctx, "d/e/f", 0o700, false); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("mkdir without parents: %v", err)
	}
	fi, err = fs.Mkdir(ctx, "d/e/f", 0o700, true)
	if err != nil || fi.Mode != 0o700 || !fi.IsDir {
		t.Fatalf("mkdir -p: %+v, %v", fi, err)
	}
	if _, err := fs.Mkdir(ctx, "d/e/f", 0, false); !errors.Is(err, api.ErrExists) {
		t.Errorf("mkdir of an existing dir: %v, want exists", err)
	}
	if _, err := fs.Write(ctx, "d/big", 0, bytes.NewReader(big)); err != nil {
		t.Fatal(err)
	}
	if got, _ := read(t, fs, "d/big"); got != string(big) {
		t.Error("1 MiB came back different")
	}
	if _, err := fs.Write(ctx, "d", 0, strings.NewReader("x")); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("write over a directory: %v", err)
	}
	if _, _, err := fs.Open(ctx, "d"); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("read a directory: %v", err)
	}
	os.Symlink("a.txt", filepath.Join(files, "l"))
	ls, err := fs.List(ctx, "/workspace")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ls {
		names = append(names, e.Name+":"+e.Type)
	}
	if got := strings.Join(names, " "); got != "a.txt:file d:dir l:symlink" {
		t.Errorf("list = %s", got)
	}
	if st, err := fs.Stat(ctx, "l"); err != nil || st.Link != "a.txt" || st.Type != api.FileSymlink {
		t.Errorf("stat l = %+v, %v", st, err)
	}
	if st, err := fs.Stat(ctx, "/tmp"); err != nil || !st.IsDir {
		t.Errorf("stat /tmp = %+v, %v", st, err)
	}
	if _, err := fs.Stat(ctx, "nope"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("stat nope: %v", err)
	}
	if err := fs.Remove(ctx, "d", false); !errors.Is(err, api.ErrExists) {
		t.Errorf("remove a full dir: %v, want exists (not empty)", err)
	}
	if err := fs.Remove(ctx, "d", true); err != nil {
		t.Fatal(err)
	}
	if err := fs.Remove(ctx, "l", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(files, "a.txt")); err != nil {
		t.Errorf("removing the symlink touched its target: %v", err)
	}
	if err := fs.Remove(ctx, "/workspace", true); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("remove the root: %v", err)
	}
	if _, err := fs.Write(ctx, "a\x00b", 0, strings.NewReader("")); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("a NUL in the path: %v", err)
	}
}
