package store

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestRotatedWriterClose: a writer on x, x renamed to x.1 while it is open,
// a new x opened for writing, then the first writer closes (a log rotation).
// The store must still count the second writer, so that a fork keeps its
// file apart: its writes after the fork must not show in the child.
func TestRotatedWriterClose(t *testing.T) {
	f := newFixture(t, map[string]string{})
	f.fork(Main, "p")
	p := f.br("p")
	fdA, resA, err := f.s.OpenFile(p, "x", unix.O_WRONLY, 0o644, true)
	if err != nil {
		t.Fatal(err)
	}
	f.rename(p, "x", "x.1")
	fdB, resB, err := f.s.OpenFile(p, "x", unix.O_WRONLY, 0o644, true)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fdB)
	unix.Close(fdA)
	f.s.CloseWrite(resA.Writer)
	if !f.s.Writing(resB.Real) {
		t.Errorf("x is open for writing and the store does not count it")
	}
	f.fork("p", "c")
	if _, err := unix.Write(fdB, []byte("after the fork")); err != nil {
		t.Fatal(err)
	}
	if got := f.read(f.br("c"), "x"); got != "" {
		t.Errorf("x in the child = %q, want it empty: the parent's writer wrote into the child's layer", got)
	}
	if got := f.read(p, "x"); got != "after the fork" {
		t.Errorf("x in the parent = %q", got)
	}
}

// TestWriterClosedAfterFork: a writer whose close comes after a fork that
// moved its file up to the parent's new head (keepWriters) uncounts the file
// there; before, the parent's file stayed "open for writing" for good, and
// every later fork copied it again.
func TestWriterClosedAfterFork(t *testing.T) {
	f := newFixture(t, map[string]string{"f": "0"})
	f.fork(Main, "p")
	p := f.br("p")
	fd, res, err := f.s.OpenFile(p, "f", unix.O_WRONLY, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	f.fork("p", "c")
	now, _ := f.s.Resolve(p, "f")
	if now.Real == res.Real {
		t.Fatalf("the fork left the writer's file at %s", now.Real)
	}
	if !f.s.Writing(now.Real) {
		t.Errorf("the writer is not counted where its file went")
	}
	unix.Close(fd)
	f.s.CloseWrite(res.Writer)
	if f.s.Writing(now.Real) || f.s.Writing(res.Real) {
		t.Errorf("closed, and still counted as a writer")
	}
}
