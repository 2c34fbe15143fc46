package store

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// A descriptor open for writing in a child stays open across the child's
// commit into main (the mount now shows main). A later fork of main must
// keep the fork's view of the file at fork time.
func TestRegressionWriterAcrossCommitIntoMain(t *testing.T) {
	f := newFixture(t, map[string]string{"f": "old"})
	f.fork(Main, "c")
	c := f.br("c")
	real, err := f.s.CopyUp(c, "f")
	if err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(real, unix.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	f.s.OpenWrite(real)
	unix.Pwrite(fd, []byte("v1!"), 0)
	f.commit("c", false)
	if got := f.baseRead("f"); got != "v1!" {
		t.Fatalf("base after commit: %q", got)
	}
	f.fork(Main, "d")
	d := f.br("d")
	// main keeps writing through its descriptor (the mount shows main now)
	unix.Pwrite(fd, []byte("v2!"), 0)
	if got := f.read(d, "f"); got != "v1!" {
		t.Errorf("fork d sees main's write after its fork: %q (want v1!)", got)
	}
	// now an ordinary write of main through a new open: preserve moves the inode
	f.write(f.br(Main), "g", "x") // unrelated
	real2, err := f.s.CopyUp(f.br(Main), "f")
	if err != nil {
		t.Fatal(err)
	}
	unix.Pwrite(fd, []byte("v3!"), 0)
	if got, _ := os.ReadFile(real2); string(got) != "v3!" {
		t.Errorf("main's file after its own write through the old descriptor: %q (want v3!)", got)
	}
	if got := f.read(d, "f"); got != "v1!" {
		t.Errorf("fork d after main's write: %q (want v1!)", got)
	}
}

// Two names of one inode in the base; a branch writes one name; both show
// the new content in the branch; after the commit into main both must.
func TestRegressionHardlinkCommitIntoMain(t *testing.T) {
	f := newFixture(t, map[string]string{"a": "old"})
	if err := os.Link(f.base+"/a", f.base+"/b"); err != nil {
		t.Fatal(err)
	}
	f.reopen()
	f.fork(Main, "x")
	x := f.br("x")
	f.write(x, "a", "new")
	t.Logf("in branch: a=%q b=%q", f.read(x, "a"), f.read(x, "b"))
	f.commit("x", true)
	if a, b := f.baseRead("a"), f.baseRead("b"); a != b {
		t.Errorf("after commit: a=%q b=%q (the branch showed both as %q)", a, b, "new")
	}
}

// A fork cannot land between a copy-up for writing and the count of the
// writer: OpenFile does both in one critical section.
func TestRegressionOpenWriteWindow(t *testing.T) {
	f := newFixture(t, map[string]string{"f": "old"})
	f.fork(Main, "p")
	p := f.br("p")
	f.write(p, "f", "p1!")
	fd, res, err := f.s.OpenFile(p, "f", unix.O_WRONLY, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	f.fork("p", "kid") // a fork lands after the open (another request, the API)
	unix.Pwrite(fd, []byte("p2!"), 0)
	if got := f.read(f.br("kid"), "f"); got != "p1!" {
		t.Errorf("kid sees its parent's write made after the fork: %q", got)
	}
	f.s.CloseWrite(res.Writer)
}
