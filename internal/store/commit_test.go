package store

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/arbor-dev/arbor/api"
)

// TestFirstCommitWins: 16 siblings commit into their parent at once:
// exactly one wins, the others get ErrStale and stay stale until aborted.
func TestFirstCommitWins(t *testing.T) {
	for _, parent := range []string{Main, "p"} {
		t.Run(parent, func(t *testing.T) {
			f := newFixture(t, isoBase)
			if parent != Main {
				f.fork(Main, "p")
				f.write(f.br("p"), "pfile", "p")
			}
			const n = 16
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("c%02d", i)
			}
			f.fork(parent, names...)
			for _, name := range names {
				f.write(f.br(name), "who", name)
				f.write(f.br(name), "own/"+name, name)
			}
			errs := make([]error, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i, name := range names {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, errs[i] = f.s.Commit(name, i%2 == 0)
				}()
			}
			close(start)
			wg.Wait()
			winner := ""
			for i, err := range errs {
				switch {
				case err == nil && winner != "":
					t.Fatalf("both %s and %s committed", winner, names[i])
				case err == nil:
					winner = names[i]
				case !errors.Is(err, api.ErrStale):
					t.Errorf("loser %s: %v, want an error wrapping ErrStale", names[i], err)
				}
			}
			if winner == "" {
				t.Fatalf("no commit succeeded: %v", errs)
			}
			pb := f.br(parent)
			if got := f.read(pb, "who"); got != winner {
				t.Errorf("%s reads who = %q, want the winner %q", parent, got, winner)
			}
			if got := f.ls(pb, "own"); got != winner {
				t.Errorf("%s lists own = %q, want only the winner's %q", parent, got, winner)
			}
			if _, err := f.s.Branch(winner); !errors.Is(err, api.ErrNotFound) {
				t.Errorf("the winner is still a branch: %v", err)
			}
			check := func(when string) {
				for _, name := range names {
					if name == winner {
						continue
					}
					b := f.br(name)
					if !f.s.IsStale(b) {
						t.Errorf("%s: loser %s is not stale", when, name)
					}
					staleOps(t, f.s, b)
					// The loser's own work reads as it wrote it.
					if got := f.read(b, "who"); got != name {
						t.Errorf("%s: stale %s reads who = %q, want its own %q", when, name, got, name)
					}
					// Its view is its own, whole: the winner's own/NAME does
					// not show (into main too: what the commit changed was
					// kept in the losers' snapshots).
					if got := f.ls(b, "own"); got != name {
						t.Errorf("%s: stale %s lists own = %q, want its own %q", when, name, got, name)
					}
					if _, err := f.s.Commit(name, false); !errors.Is(err, api.ErrStale) {
						t.Errorf("%s: commit of stale %s = %v", when, name, err)
					}
				}
			}
			check("live")
			f.reopen()
			check("after reopen")
			for _, name := range names {
				if name != winner {
					if err := f.s.Abort(name); err != nil {
						t.Errorf("abort %s: %v", name, err)
					}
				}
			}
			want := 2 // main and p
			if parent == Main {
				want = 1
			}
			if got := len(f.s.Branches()); got != want {
				t.Errorf("branches after the aborts: %v", f.s.Branches())
			}
		})
	}
}

// staleOps checks that a stale branch reads (its work can be rescued) and
// that every change to it fails with ESTALE.
func staleOps(t *testing.T, s *Store, b *Branch) {
	t.Helper()
	if _, err := s.Resolve(b, "a"); err != nil {
		t.Errorf("resolve on stale %s: %v, want its view", b.Name, err)
	}
	if _, err := s.ReadDir(b, ""); err != nil {
		t.Errorf("readdir on stale %s: %v, want its view", b.Name, err)
	}
	if _, err := s.Diff(b.Name); err != nil {
		t.Errorf("diff of stale %s: %v, want its changes", b.Name, err)
	}
	refusedChanges(t, s, b)
}

// goneOps checks that every path operation on b, committed or aborted,
// fails with ESTALE.
func goneOps(t *testing.T, s *Store, b *Branch) {
	t.Helper()
	if _, err := s.Resolve(b, "a"); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("resolve on gone %s: %v, want ESTALE", b.Name, err)
	}
	if _, err := s.ReadDir(b, ""); !errors.Is(err, syscall.ESTALE) {
		t.Errorf("readdir on gone %s: %v, want ESTALE", b.Name, err)
	}
	refusedChanges(t, s, b)
}

// refusedChanges checks that every change to b fails with ESTALE.
func refusedChanges(t *testing.T, s *Store, b *Branch) {
	t.Helper()
	mk := func(int, string) error { t.Errorf("%s: mk called on a stale branch", b.Name); return nil }
	ops := map[string]func() error{
		"copyup": func() error { _, err := s.CopyUp(b, "a"); return err },
		"create": func() error { return s.Create(b, "newfile", false, mk) },
		"remove": func() error { return s.Remove(b, "a", false) },
		"rename": func() error { return s.Rename(b, "a", "a2", 0) },
		"link":   func() error { return s.Link(b, "a", "a2") },
	}
	for name, op := range ops {
		if err := op(); !errors.Is(err, syscall.ESTALE) {
			t.Errorf("%s on %s: %v, want ESTALE", name, b.Name, err)
		}
	}
}

// TestCommitAfterParentChanged: a parent that wrote after the fork refuses
// the commit with a clear ErrStale, and the branch is kept intact.
func TestCommitAfterParentChanged(t *testing.T) {
	tests := []struct {
		name   string
		parent string
		change func(f *fixture, p *Branch)
	}{
		{"main wrote", Main, func(f *fixture, p *Branch) { f.write(p, "a", "a1") }},
		{"main deleted", Main, func(f *fixture, p *Branch) { f.rm(p, "b") }},
		{"main created", Main, func(f *fixture, p *Branch) { f.write(p, "n", "n") }},
		{"branch wrote", "p", func(f *fixture, p *Branch) { f.write(p, "a", "a1") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, isoBase)
			if tt.parent != Main {
				f.fork(Main, "p")
			}
			f.fork(tt.parent, "c")
			f.write(f.br("c"), "cfile", "mine")
			tt.change(f, f.br(tt.parent))
			_, err := f.s.Commit("c", true)
			if !errors.Is(err, api.ErrStale) {
				t.Fatalf("commit = %v, want ErrStale", err)
			}
			if msg := err.Error(); !strings.Contains(msg, "changed since") || !strings.Contains(msg, tt.parent) {
				t.Errorf("message %q does not say the parent changed", msg)
			}
			c := f.br("c")
			if f.s.IsStale(c) {
				t.Errorf("c is marked stale by a refused commit")
			}
			if got := f.read(c, "cfile"); got != "mine" {
				t.Errorf("c lost its file: %q", got)
			}
			if got := f.read(f.br(tt.parent), "cfile"); got != "ENOENT" {
				t.Errorf("the refused commit leaked into the parent: %q", got)
			}
			f.write(c, "cfile", "still writable")
			if err := f.s.Abort("c"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestStaleAfterCommit: a commit makes the siblings and their descendants
// stale, not the parent's other relatives. Commit is leaf-only: a branch
// with children is refused, naming them, and nothing changes.
func TestStaleAfterCommit(t *testing.T) {
	f := newFixture(t, isoBase)
	f.fork(Main, "p", "q")
	f.write(f.br("p"), "p", "p")
	f.fork("p", "a", "b")
	f.write(f.br("b"), "b", "b")
	f.fork("b", "b1")
	f.fork("b1", "b11")
	f.write(f.br("a"), "a", "a")
	f.fork("a", "a1", "a2")
	f.write(f.br("a1"), "a1", "a1")
	_, err := f.s.Commit("a", false)
	if !errors.Is(err, api.ErrState) || !errors.Is(err, syscall.EBUSY) || !strings.Contains(err.Error(), "a1, a2") {
		t.Fatalf("commit of a with children a1, a2: %v, want ErrState (EBUSY) naming them", err)
	}
	for _, n := range []string{"a", "a1", "a2", "b"} {
		if f.s.IsStale(f.br(n)) {
			t.Fatalf("%s is stale after a refused commit", n)
		}
	}
	if got := f.read(f.br("a1"), "a1"); got != "a1" {
		t.Fatalf("a1 after a refused commit reads %q", got)
	}
	f.commit("a1", false) // into a: a2 stale
	if err := f.s.Abort("a2"); err != nil {
		t.Fatal(err)
	}
	res := f.commit("a", false)
	if res.Parent != "p" || strings.Join(res.Stale, ",") != "b,b1,b11" {
		t.Fatalf("commit result %+v, want parent p and stale b,b1,b11", res)
	}
	if got := f.read(f.br("p"), "a1"); got != "a1" {
		t.Fatalf("p reads a1 = %q after a1 committed into a and a into p", got)
	}
	for name, want := range map[string]bool{"p": false, "q": false, "b": true, "b1": true, "b11": true} {
		if got := f.s.IsStale(f.br(name)); got != want {
			t.Errorf("%s stale = %v, want %v", name, got, want)
		}
	}
	// Fork and create on a stale branch fail with ErrStale / ESTALE.
	if err := f.s.Fork("b", "b2"); !errors.Is(err, api.ErrStale) {
		t.Errorf("fork of stale b = %v", err)
	}
	staleOps(t, f.s, f.br("b11"))
	// Abort of a stale branch drops its subtree.
	if err := f.s.Abort("b"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"b", "b1", "b11"} {
		if _, err := f.s.Branch(n); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("%s after abort of b: %v", n, err)
		}
	}
	// A commit into main makes every other branch stale.
	res = f.commit("p", true)
	if strings.Join(res.Stale, ",") != "q" {
		t.Errorf("commit into main: newly stale %v, want q", res.Stale)
	}
	if got := f.baseRead("a"); got != "a" {
		t.Errorf("base a = %q", got)
	}
}

// TestRequestErrors: the sentinel each bad request wraps.
func TestRequestErrors(t *testing.T) {
	f := newFixture(t, isoBase)
	f.fork(Main, "c")
	long := strings.Repeat("x", 200)
	tests := []struct {
		name string
		op   func() error
		want error
	}{
		{"commit main", func() error { _, err := f.s.Commit(Main, false); return err }, api.ErrBadRequest},
		{"abort main", func() error { return f.s.Abort(Main) }, api.ErrBadRequest},
		{"commit unknown", func() error { _, err := f.s.Commit("nosuch", false); return err }, api.ErrNotFound},
		{"abort unknown", func() error { return f.s.Abort("nosuch") }, api.ErrNotFound},
		{"fork unknown", func() error { return f.s.Fork("nosuch", "x") }, api.ErrNotFound},
		{"branch unknown", func() error { _, err := f.s.Branch("nosuch"); return err }, api.ErrNotFound},
		{"fork name with /", func() error { return f.s.Fork(Main, "a/b") }, api.ErrBadRequest},
		{"fork empty name", func() error { return f.s.Fork(Main, "") }, api.ErrBadRequest},
		{"fork no names", func() error { return f.s.Fork(Main) }, api.ErrBadRequest},
		{"fork dot", func() error { return f.s.Fork(Main, "..") }, api.ErrBadRequest},
		{"fork long name", func() error { return f.s.Fork(Main, long) }, api.ErrBadRequest},
		{"fork name twice in one call", func() error { return f.s.Fork(Main, "x", "x") }, api.ErrBadRequest},
		{"fork existing child", func() error { return f.s.Fork(Main, "c") }, api.ErrExists},
		{"fork main", func() error { return f.s.Fork("c", Main) }, api.ErrExists},
		{"open without dir", func() error { _, err := Open(Config{Base: f.base}); return err }, api.ErrBadRequest},
		{"open on a file", func() error { _, err := Open(Config{Dir: t.TempDir(), Base: f.base + "/a"}); return err }, api.ErrBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.op(); !errors.Is(err, tt.want) {
				t.Fatalf("%v, want %v", err, tt.want)
			}
		})
	}
	// A fork of an existing name created nothing; the first fork is intact.
	if err := f.s.Fork(Main, "c2", "c"); !errors.Is(err, api.ErrExists) {
		t.Fatalf("fork with one existing child = %v", err)
	}
	if _, err := f.s.Branch("c2"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("a refused fork made c2: %v", err)
	}
	if got := len(f.s.Branches()); got != 2 {
		t.Errorf("branches: %v", f.s.Branches())
	}
	// Reserved names inside a branch.
	c := f.br("c")
	if err := f.s.Create(c, ".wh.x", false, func(int, string) error { return nil }); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("create .wh.x = %v, want EINVAL", err)
	}
	if err := f.s.Create(c, "a", false, func(int, string) error { return nil }); !errors.Is(err, syscall.EEXIST) {
		t.Errorf("create over a = %v, want EEXIST", err)
	}
	if err := f.s.Create(c, "a/x", false, func(int, string) error { return nil }); !errors.Is(err, syscall.ENOTDIR) {
		t.Errorf("create under a file = %v, want ENOTDIR", err)
	}
}

// TestNameReuse: a name freed by a commit can be forked again, and starts
// with no children.
func TestNameReuse(t *testing.T) {
	f := newFixture(t, isoBase)
	f.fork(Main, "c")
	f.write(f.br("c"), "c", "old")
	f.fork("c", "c1")
	f.commit("c1", false)
	f.commit("c", false)
	f.fork(Main, "c")
	for _, when := range []string{"live", "after reopen"} {
		if got := f.s.Subtree("c"); strings.Join(got, ",") != "c" {
			t.Errorf("%s: subtree of the new c = %v, want only c", when, got)
		}
		f.reopen()
	}
	f.fork("c", "x")
	f.write(f.br("x"), "x", "x")
	if res := f.commit("x", false); len(res.Stale) != 0 {
		t.Errorf("commit into the new c made %v stale", res.Stale)
	}
	if err := f.s.Abort("c"); err != nil {
		t.Fatal(err)
	}
	if got := f.s.Branches(); len(got) != 1 || got[0].Name != Main {
		t.Errorf("after aborting the new c: %v, want only main", got)
	}
}

// TestCommitOver: CommitOver makes the parent's view the child's even
// after the parent changed since the fork (its own changes go), makes the
// siblings stale like Commit, writes nothing into the base,
// survives a reopen, and refuses a parent that is main.
func TestCommitOver(t *testing.T) {
	f := newFixture(t, isoBase)
	f.fork(Main, "p")
	f.write(f.br("p"), "old", "before the fork")
	f.fork("p", "c", "sib")
	f.write(f.br("c"), "cfile", "mine")
	f.rm(f.br("c"), "old")
	f.write(f.br("p"), "late", "the parent after the fork")
	f.write(f.br("p"), "cfile", "the parent's own")
	if _, err := f.s.Commit("c", true); !errors.Is(err, api.ErrStale) {
		t.Fatalf("Commit over a changed parent: %v, want ErrStale", err)
	}
	res, err := f.s.CommitOver("c", true)
	if err != nil {
		t.Fatal(err)
	}
	if res.Parent != "p" || len(res.Stale) != 1 || res.Stale[0] != "sib" {
		t.Fatalf("CommitOver result %+v, want parent p and sib stale", res)
	}
	check := func() {
		t.Helper()
		p := f.br("p")
		for rel, want := range map[string]string{"cfile": "mine", "old": "ENOENT", "late": "ENOENT", "a": isoBase["a"]} {
			if got := f.read(p, rel); got != want {
				t.Errorf("p reads %s = %q, want %q", rel, got, want)
			}
		}
		if _, err := f.s.Branch("c"); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("c after CommitOver: %v, want it gone", err)
		}
		if !f.s.IsStale(f.br("sib")) {
			t.Errorf("sib is not stale")
		}
		if got := f.baseRead("cfile"); got != "ENOENT" {
			t.Errorf("CommitOver wrote the base: %q", got)
		}
	}
	check()
	f.reopen()
	check()
	f.fork(Main, "q")
	if _, err := f.s.CommitOver("q", true); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("CommitOver into main: %v, want ErrBadRequest", err)
	}
}
