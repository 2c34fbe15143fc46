package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// fixture is a store over a temporary base, driven the way the FUSE layer
// drives it: Create with a callback that makes the real file, CopyUp and a
// write to the returned real path, Resolve and a read of Res.Real.
type fixture struct {
	t         tb
	s         *Store
	base, dir string
}

// tb is what the fixture needs of a test: testing.TB or a rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}

// newFixture makes a base holding files (a key ending in "/" is a
// directory) and opens a store over it.
func newFixture(t testing.TB, files map[string]string) *fixture {
	t.Helper()
	f := &fixture{t: t, base: t.TempDir(), dir: t.TempDir()}
	for p, data := range files {
		full := filepath.Join(f.base, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f.open()
	t.Cleanup(func() {
		if f.s != nil {
			f.s.Close()
		}
	})
	return f
}

func (f *fixture) open() {
	f.t.Helper()
	s, err := Open(Config{Dir: f.dir, Base: f.base})
	if err != nil {
		f.t.Fatalf("open: %v", err)
	}
	f.s = s
}

func (f *fixture) reopen() {
	f.t.Helper()
	if err := f.s.Close(); err != nil {
		f.t.Fatalf("close: %v", err)
	}
	f.s = nil
	f.open()
}

func (f *fixture) br(name string) *Branch {
	f.t.Helper()
	b, err := f.s.Branch(name)
	if err != nil {
		f.t.Fatalf("branch %s: %v", name, err)
	}
	return b
}

func (f *fixture) fork(parent string, children ...string) {
	f.t.Helper()
	if err := f.s.Fork(parent, children...); err != nil {
		f.t.Fatalf("fork %s %v: %v", parent, children, err)
	}
}

func (f *fixture) commit(child string, durable bool) CommitResult {
	f.t.Helper()
	r, err := f.s.Commit(child, durable)
	if err != nil {
		f.t.Fatalf("commit %s: %v", child, err)
	}
	return r
}

// write sets rel's content in b, making missing parent directories.
func (f *fixture) write(b *Branch, rel, data string) {
	f.t.Helper()
	if err := writeErr(f.s, b, rel, data); err != nil {
		f.t.Fatalf("write %s:%s: %v", b.Name, rel, err)
	}
}

// writeErr is write without the test: what a FUSE open(O_CREAT|O_TRUNC) and
// write would do.
func writeErr(s *Store, b *Branch, rel, data string) error {
	if dir, _ := splitRel(rel); dir != "" {
		if _, err := s.Resolve(b, dir); errors.Is(err, syscall.ENOENT) {
			if err := mkdirErr(s, b, dir); err != nil {
				return err
			}
		}
	}
	if _, err := s.Resolve(b, rel); err == nil {
		p, err := s.CopyUp(b, rel)
		if err != nil {
			return err
		}
		return os.WriteFile(p, []byte(data), 0o644)
	}
	return s.Create(b, rel, false, byPath(func(real string) error {
		fd, err := os.OpenFile(real, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return err
		}
		_, err = fd.WriteString(data)
		if err2 := fd.Close(); err == nil {
			err = err2
		}
		return err
	}))
}

// byPath adapts a test's maker of a real path to Create's (a directory
// descriptor and a name): the tests trust their own temporary directories.
func byPath(mk func(real string) error) func(dir int, name string) error {
	return func(dir int, name string) error { return mk(fmt.Sprintf("/proc/self/fd/%d/%s", dir, name)) }
}

func mkdirErr(s *Store, b *Branch, rel string) error {
	if dir, _ := splitRel(rel); dir != "" {
		if _, err := s.Resolve(b, dir); errors.Is(err, syscall.ENOENT) {
			if err := mkdirErr(s, b, dir); err != nil {
				return err
			}
		}
	}
	return s.Create(b, rel, true, byPath(func(real string) error { return os.Mkdir(real, 0o755) }))
}

func (f *fixture) mkdir(b *Branch, rel string) {
	f.t.Helper()
	if err := mkdirErr(f.s, b, rel); err != nil {
		f.t.Fatalf("mkdir %s:%s: %v", b.Name, rel, err)
	}
}

func (f *fixture) rm(b *Branch, rel string) {
	f.t.Helper()
	res, err := f.s.Resolve(b, rel)
	if err != nil {
		f.t.Fatalf("rm %s:%s: %v", b.Name, rel, err)
	}
	if err := f.s.Remove(b, rel, res.IsDir()); err != nil {
		f.t.Fatalf("rm %s:%s: %v", b.Name, rel, err)
	}
}

func (f *fixture) rename(b *Branch, old, new string) {
	f.t.Helper()
	if err := f.s.Rename(b, old, new, 0); err != nil {
		f.t.Fatalf("rename %s:%s -> %s: %v", b.Name, old, new, err)
	}
}

// read returns rel's content in b, "ENOENT" if it does not exist, "DIR" for
// a directory, or the error's text.
func (f *fixture) read(b *Branch, rel string) string {
	f.t.Helper()
	return readIn(f.s, b, rel)
}

func readIn(s *Store, b *Branch, rel string) string {
	r, err := s.Resolve(b, rel)
	if errors.Is(err, syscall.ENOENT) {
		return "ENOENT"
	}
	if err != nil {
		return "error: " + err.Error()
	}
	if r.IsDir() {
		return "DIR"
	}
	d, err := os.ReadFile(r.Real)
	if err != nil {
		return "error: " + err.Error()
	}
	return string(d)
}

// mode returns rel's permission bits in b.
func (f *fixture) mode(b *Branch, rel string) os.FileMode {
	f.t.Helper()
	r, err := f.s.Resolve(b, rel)
	if err != nil {
		f.t.Fatalf("resolve %s:%s: %v", b.Name, rel, err)
	}
	fi, err := os.Lstat(r.Real)
	if err != nil {
		f.t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// ls returns the sorted names of the merged directory rel of b, a directory
// with a trailing "/".
func (f *fixture) ls(b *Branch, rel string) string {
	f.t.Helper()
	ents, err := f.s.ReadDir(b, rel)
	if err != nil {
		return "error: " + err.Error()
	}
	var names []string
	for _, e := range ents {
		n := e.Name
		if e.Mode == syscall.S_IFDIR {
			n += "/"
		}
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

// baseRead reads a file of the base directory directly.
func (f *fixture) baseRead(rel string) string {
	d, err := os.ReadFile(filepath.Join(f.base, rel))
	if errors.Is(err, os.ErrNotExist) {
		return "ENOENT"
	}
	if err != nil {
		return "error: " + err.Error()
	}
	return string(d)
}

// layerDirs lists the layer directories on disk.
func (f *fixture) layerDirs() []string {
	ents, _ := os.ReadDir(filepath.Join(f.dir, "layers"))
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
