package store

import (
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"golang.org/x/sys/unix"
	"pgregory.net/rapid"
)

// The model: every branch is a plain map of its files, forks copy it,
// commits replace the parent's with the child's. The store must agree
// with it after every step of a random sequence of operations.

const dirMark = "\x00dir"

type mbranch struct {
	parent  string
	files   map[string]string // path -> content, dirMark for a directory
	ver     int               // bumped by every change
	forkVer int               // the parent's ver at the fork
	// holds counts the writers opened in the branch (copy-ups with no
	// write yet): whether one makes a child's commit stale is the store's
	// call (not if the file was kept for a writer at the fork and is
	// unchanged), so after one the model accepts either answer.
	holds, forkHolds int
	stale            bool
}

type model struct {
	br   map[string]*mbranch
	next int
}

func (m *model) isDir(b *mbranch, p string) bool { return p == "" || b.files[p] == dirMark }

func (m *model) exists(b *mbranch, p string) bool { _, ok := b.files[p]; return p == "" || ok }

func (m *model) children(b *mbranch, p string) []string {
	var out []string
	for q := range b.files {
		if d, _ := splitRel(q); d == p && q != "" {
			out = append(out, q)
		}
	}
	return out
}

func (m *model) subtree(name string) []string {
	out := []string{name}
	for n, b := range m.br {
		for p := b.parent; p != ""; {
			if p == name {
				out = append(out, n)
				break
			}
			pb := m.br[p]
			if pb == nil {
				break
			}
			p = pb.parent
		}
	}
	return out
}

var modelPaths = func() []string {
	names := []string{"a", "b", "d"}
	var out []string
	for _, x := range names {
		out = append(out, x)
		for _, y := range names {
			out = append(out, x+"/"+y)
			for _, z := range names[:2] {
				out = append(out, x+"/"+y+"/"+z)
			}
		}
	}
	return out
}()

// renameModel applies renameat2's rules to the model; it returns whether
// the rename must succeed.
func renameModel(m *model, b *mbranch, old, new string, flags uint32) bool {
	exch := flags&unix.RENAME_EXCHANGE != 0
	np, _ := splitRel(new)
	switch {
	case !m.exists(b, old), !m.isDir(b, np), strings.HasPrefix(new, old+"/"), exch && strings.HasPrefix(old, new+"/"):
		return false
	case old == new:
		return true
	}
	exists := m.exists(b, new)
	switch {
	case exch && !exists, flags&unix.RENAME_NOREPLACE != 0 && exists:
		return false
	case exists && !exch && m.isDir(b, old) != m.isDir(b, new):
		return false
	case exists && !exch && m.isDir(b, new) && len(m.children(b, new)) > 0:
		return false
	}
	take := func(from string) map[string]string {
		out := map[string]string{}
		for p, v := range b.files {
			if p == from || strings.HasPrefix(p, from+"/") {
				out[p[len(from):]] = v
				delete(b.files, p)
			}
		}
		return out
	}
	a := take(old)
	var bb map[string]string
	if exch {
		bb = take(new)
	} else {
		take(new)
	}
	for r, v := range a {
		b.files[new+r] = v
	}
	for r, v := range bb {
		b.files[old+r] = v
	}
	return true
}

// view walks the store's view of b into a map like the model's.
func view(s *Store, b *Branch) (map[string]string, error) {
	out := map[string]string{}
	var walk func(dir string) error
	walk = func(dir string) error {
		ents, err := s.ReadDir(b, dir)
		if err != nil {
			return fmt.Errorf("readdir %q: %w", dir, err)
		}
		for _, e := range ents {
			p := joinRel(dir, e.Name)
			r, err := s.Resolve(b, p)
			if err != nil {
				return fmt.Errorf("resolve %q listed in %q: %w", p, dir, err)
			}
			if r.IsDir() != (e.Mode == syscall.S_IFDIR) {
				return fmt.Errorf("%q: listed with mode %o, resolves to dir=%v", p, e.Mode, r.IsDir())
			}
			if r.IsDir() {
				out[p] = dirMark
				if err := walk(p); err != nil {
					return err
				}
				continue
			}
			d, err := os.ReadFile(r.Real)
			if err != nil {
				return err
			}
			out[p] = string(d)
		}
		return nil
	}
	return out, walk("")
}

func baseView(base string) map[string]string {
	out := map[string]string{}
	filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == base {
			return nil
		}
		rel := p[len(base)+1:]
		if d.IsDir() {
			out[rel] = dirMark
			return nil
		}
		data, _ := os.ReadFile(p)
		out[rel] = string(data)
		return nil
	})
	return out
}

func diffMaps(got, want map[string]string) string {
	var keys []string
	seen := map[string]bool{}
	for k := range got {
		keys, seen[k] = append(keys, k), true
	}
	for k := range want {
		if !seen[k] {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		if g != w || gok != wok {
			out = append(out, fmt.Sprintf("%s: store %q (%v), model %q (%v)", k, g, gok, w, wok))
		}
	}
	return strings.Join(out, "; ")
}

type rapidTB struct{ *rapid.T }

func (rapidTB) Helper() {}

// TestModel runs random operations on random branches and compares every
// branch's whole view, and the base directory, with the model.
func TestModel(t *testing.T) {
	// Keep the default run short (the package's tests have a time budget);
	// -rapid.checks=N on the command line runs a longer search.
	if fl := flag.Lookup("rapid.checks"); fl != nil && fl.Value.String() == fl.DefValue {
		fl.Value.Set("60")
		defer fl.Value.Set(fl.DefValue)
	}
	rapid.Check(t, func(rt *rapid.T) {
		base, err := os.MkdirTemp("", "arbor-model-base")
		if err != nil {
			rt.Fatal(err)
		}
		dir, err := os.MkdirTemp("", "arbor-model-dir")
		if err != nil {
			rt.Fatal(err)
		}
		defer os.RemoveAll(base)
		defer os.RemoveAll(dir)
		os.WriteFile(filepath.Join(base, "a"), []byte("a0"), 0o644)
		os.MkdirAll(filepath.Join(base, "d/a"), 0o755)
		os.WriteFile(filepath.Join(base, "d/b"), []byte("db0"), 0o644)
		os.WriteFile(filepath.Join(base, "d/a/b"), []byte("dab0"), 0o644)
		f := &fixture{t: rapidTB{rt}, base: base, dir: dir}
		f.open()
		defer func() { f.s.Close() }()
		m := &model{br: map[string]*mbranch{Main: {files: baseView(base)}}}

		// Descriptors held open for writing, as the FUSE layer holds them.
		type held struct {
			branch, path, real string
			fd                 *os.File
			w                  *Writer
		}
		var fds []held
		closeAll := func() {
			for _, h := range fds {
				h.fd.Close()
				f.s.CloseWrite(h.w)
			}
			fds = nil
		}
		defer closeAll()

		steps := rapid.IntRange(10, 40).Draw(rt, "steps")
		for step := range steps {
			var names []string
			for n := range m.br {
				names = append(names, n)
			}
			sort.Strings(names)
			name := rapid.SampledFrom(names).Draw(rt, "branch")
			mb := m.br[name]
			b := f.br(name)
			path := rapid.SampledFrom(modelPaths).Draw(rt, "path")
			data := fmt.Sprintf("v%d", step)
			op := rapid.SampledFrom([]string{"write", "write", "mkdir", "remove", "rename", "fork", "fork", "commit", "abort", "reopen", "hold", "fdwrite"}).Draw(rt, "op")
			switch op {
			case "remove", "rename", "commit", "abort", "reopen":
				closeAll() // keep the model simple: no descriptor outlives its file's name
			}
			if mb.stale && op != "abort" && op != "reopen" {
				// Every operation on a stale branch fails with ESTALE.
				if err := writeErr(f.s, b, path, data); !errors.Is(err, syscall.ESTALE) {
					rt.Fatalf("write on stale %s: %v", name, err)
				}
				continue
			}
			changed := false
			switch op {
			case "write":
				pdir, _ := splitRel(path)
				ok := m.isDir(mb, pdir) && !m.isDir(mb, path)
				err := writeOnce(f.s, b, path, data)
				if ok != (err == nil) {
					rt.Fatalf("write %s:%s = %v, model says ok=%v", name, path, err, ok)
				}
				if ok {
					mb.files[path], changed = data, true
				}
			case "mkdir":
				pdir, _ := splitRel(path)
				ok := m.isDir(mb, pdir) && !m.exists(mb, path)
				err := f.s.Create(b, path, true, byPath(func(real string) error { return os.Mkdir(real, 0o755) }))
				if ok != (err == nil) {
					rt.Fatalf("mkdir %s:%s = %v, model says ok=%v", name, path, err, ok)
				}
				if ok {
					mb.files[path], changed = dirMark, true
				}
			case "remove":
				isDir := m.isDir(mb, path)
				ok := m.exists(mb, path) && (!isDir || len(m.children(mb, path)) == 0)
				err := f.s.Remove(b, path, isDir)
				if ok != (err == nil) {
					rt.Fatalf("remove %s:%s = %v, model says ok=%v", name, path, err, ok)
				}
				if ok {
					delete(mb.files, path)
					changed = true
				}
			case "rename":
				to := rapid.SampledFrom(modelPaths).Draw(rt, "to")
				flags := rapid.SampledFrom([]uint32{0, 0, unix.RENAME_NOREPLACE, unix.RENAME_EXCHANGE}).Draw(rt, "flags")
				ok := renameModel(m, mb, path, to, flags)
				err := f.s.Rename(b, path, to, flags)
				if ok != (err == nil) {
					rt.Fatalf("rename %s:%s -> %s (flags %d) = %v, model says ok=%v", name, path, to, flags, err, ok)
				}
				changed = ok && path != to
			case "hold":
				if r, err := f.s.Resolve(b, path); err != nil || r.IsDir() {
					continue
				}
				real, err := f.s.CopyUp(b, path)
				if err != nil {
					rt.Fatalf("copy-up %s:%s: %v", name, path, err)
				}
				fd, err := os.OpenFile(real, os.O_WRONLY, 0)
				if err != nil {
					rt.Fatal(err)
				}
				fds = append(fds, held{name, path, real, fd, f.s.OpenWrite(real)})
				mb.holds++
			case "fdwrite":
				if len(fds) == 0 {
					continue
				}
				h := fds[rapid.IntRange(0, len(fds)-1).Draw(rt, "fd")]
				if err := h.fd.Truncate(0); err != nil {
					rt.Fatal(err)
				}
				if _, err := h.fd.WriteAt([]byte(data), 0); err != nil {
					rt.Fatal(err)
				}
				mb = m.br[h.branch]
				mb.files[h.path] = data
				changed = true
			case "fork":
				m.next++
				child := fmt.Sprintf("b%d", m.next)
				f.fork(name, child)
				// A writer held across the fork keeps its file out of the
				// child's view; the parent changes only if it writes
				// (fdwrite), not by the fork itself.
				files := make(map[string]string, len(mb.files))
				for k, v := range mb.files {
					files[k] = v
				}
				m.br[child] = &mbranch{parent: name, files: files, forkVer: mb.ver, forkHolds: mb.holds}
			case "commit":
				if name == Main {
					continue
				}
				if len(m.subtree(name)) > 1 {
					// Commit is leaf-only: refused, and nothing changes.
					_, err := f.s.Commit(name, step%2 == 0)
					want := api.ErrState
					if mb.stale {
						want = api.ErrStale
					}
					if !errors.Is(err, want) {
						rt.Fatalf("commit of %s, which has children: %v, want %v", name, err, want)
					}
					continue
				}
				pm := m.br[mb.parent]
				ok := pm != nil && !pm.stale && pm.ver == mb.forkVer
				either := ok && pm.holds != mb.forkHolds
				_, err := f.s.Commit(name, step%2 == 0)
				if either {
					ok = err == nil
				}
				if ok != (err == nil) {
					rt.Fatalf("commit %s into %s = %v, model says ok=%v", name, mb.parent, err, ok)
				}
				if !ok {
					if !errors.Is(err, api.ErrStale) {
						rt.Fatalf("refused commit: %v, want ErrStale", err)
					}
					continue
				}
				pm.files = mb.files
				pm.ver++
				// Every other branch under the parent (all of them, for main)
				// is stale.
				for _, n := range m.subtree(mb.parent) {
					if n != mb.parent {
						m.br[n].stale = true
					}
				}
				delete(m.br, name)
			case "abort":
				if name == Main {
					continue
				}
				drop := m.subtree(name)
				if err := f.s.Abort(name); err != nil {
					rt.Fatalf("abort %s: %v", name, err)
				}
				for _, n := range drop {
					delete(m.br, n)
				}
			case "reopen":
				before := chainsOf(f.s)
				f.reopen()
				if after := chainsOf(f.s); !maps.EqualFunc(before, after, slices.Equal) {
					rt.Fatalf("chains changed at reopen:\n%v\n%v", before, after)
				}
			}
			if changed {
				mb.ver++
			}
			// Check everything.
			for n, o := range m.br {
				bb, err := f.s.Branch(n)
				if err != nil {
					rt.Fatalf("after %s %s:%s: model branch %s: %v", op, name, path, n, err)
				}
				if f.s.IsStale(bb) != o.stale {
					rt.Fatalf("after %s %s:%s: %s stale=%v, model %v", op, name, path, n, f.s.IsStale(bb), o.stale)
				}
				if o.stale {
					continue
				}
				got, err := view(f.s, bb)
				if err != nil {
					rt.Fatalf("after %s %s:%s: view of %s: %v", op, name, path, n, err)
				}
				if d := diffMaps(got, o.files); d != "" {
					rt.Fatalf("after %s %s:%s: %s differs: %s", op, name, path, n, d)
				}
			}
			if got := len(f.s.Branches()); got != len(m.br) {
				rt.Fatalf("store has %d branches, model %d", got, len(m.br))
			}
			if err := f.s.checkRefs(); err != nil {
				rt.Fatalf("after %s %s:%s: %v", op, name, path, err)
			}
			if d := diffMaps(baseView(base), m.br[Main].files); d != "" {
				rt.Fatalf("after %s %s:%s: the base differs: %s", op, name, path, d)
			}
		}
	})
}

// writeOnce writes rel without making parents: fails if the parent is
// missing or rel is a directory.
func writeOnce(s *Store, b *Branch, rel, data string) error {
	if r, err := s.Resolve(b, rel); err == nil {
		if r.IsDir() {
			return syscall.EISDIR
		}
		p, err := s.CopyUp(b, rel)
		if err != nil {
			return err
		}
		return os.WriteFile(p, []byte(data), 0o644)
	}
	return s.Create(b, rel, false, byPath(func(real string) error { return os.WriteFile(real, []byte(data), 0o644) }))
}

// chainsOf maps each branch to its chain's layer IDs (its snapshot last).
func chainsOf(s *Store) map[string][]uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[string][]uint64{}
	for n, b := range s.branches {
		var ids []uint64
		for _, l := range b.chain {
			ids = append(ids, l.id)
		}
		if b.snap != nil {
			ids = append(ids, 1<<63|b.snap.id)
		}
		out[n] = ids
	}
	return out
}
