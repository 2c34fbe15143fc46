package store

import (
	"errors"
	"syscall"
	"testing"

	"github.com/arbor-dev/arbor/api"
)

// TestCommitApplyFails: a commit into main whose apply fails part way
// (here its third step, with EIO) tells the caller, loses nothing and is
// finished by committing again: the child keeps its files and refuses
// reads and changes (ESTALE) and abort meanwhile, its siblings are stale at once (the base
// they forked from is half changed), and main forks and commits nothing
// else. A commit left so across a restart is finished the same way; and a
// second commit never plans anew over the first's half-applied steps
// (which lost files before).
func TestCommitApplyFails(t *testing.T) {
	for _, restart := range []bool{false, true} {
		f := newFixture(t, map[string]string{"a": "a0", "b": "b0", "d/x": "x0"})
		f.fork(Main, "c", "sib")
		c := f.br("c")
		f.write(c, "a", "a1")
		f.write(c, "b", "b1")
		f.write(c, "d/x", "x1")
		f.write(c, "n", "n1")
		f.rm(c, "d/x")
		f.write(c, "d/y", "y1")
		steps := 0
		faultApply = func(op) error {
			if steps++; steps == 3 {
				return syscall.EIO
			}
			return nil
		}
		t.Cleanup(func() { faultApply = nil })
		_, err := f.s.Commit("c", true)
		if !errors.Is(err, syscall.EIO) || !errors.Is(err, api.ErrBusy) {
			t.Fatalf("commit with a failing step: %v, want EIO under ErrBusy", err)
		}
		if !f.s.IsStale(f.br("sib")) {
			t.Errorf("a sibling is not stale after the commit was decided")
		}
		if err := f.s.Abort("c"); !errors.Is(err, api.ErrBusy) {
			t.Errorf("abort of a half-applied commit: %v, want ErrBusy", err)
		}
		if err := writeErr(f.s, c, "late", "z"); !errors.Is(err, syscall.ESTALE) {
			t.Errorf("a write to a half-committed branch: %v, want ESTALE", err)
		}
		if _, err := f.s.Resolve(c, "a"); !errors.Is(err, syscall.ESTALE) {
			t.Errorf("a read of a half-committed branch: %v, want ESTALE (its files are moving into main)", err)
		}
		if err := f.s.Fork(Main, "other"); !errors.Is(err, api.ErrBusy) {
			t.Errorf("fork of main while a commit into it is half applied: %v, want ErrBusy", err)
		}
		if restart {
			faultApply = func(op) error { return syscall.EIO } // the replay fails too
			f.reopen()
			c = f.br("c")
			if err := f.s.Abort("c"); !errors.Is(err, api.ErrBusy) {
				t.Errorf("after a restart whose replay failed, abort: %v, want ErrBusy", err)
			}
		}
		faultApply = nil
		if _, err := f.s.Commit("c", true); err != nil {
			t.Fatalf("commit again: %v", err)
		}
		for p, want := range map[string]string{"a": "a1", "b": "b1", "n": "n1", "d/y": "y1", "d/x": "ENOENT"} {
			if got := f.baseRead(p); got != want {
				t.Errorf("restart %v: base %s = %q, want %q", restart, p, got, want)
			}
		}
		if _, err := f.s.Branch("c"); !errors.Is(err, api.ErrNotFound) {
			t.Errorf("c after its commit finished: %v", err)
		}
		f.fork(Main, "next") // main is free again
		f.reopen()
		if got := f.baseRead("a"); got != "a1" {
			t.Errorf("after reopen a = %q", got)
		}
	}
}
