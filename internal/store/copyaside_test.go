package store

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCopyUpAside: a file big enough to be copied outside the lock copies
// up whole, with its metadata and inode number, its reservation released
// and its blocks counted once; a second copy-up finds it in the head.
func TestCopyUpAside(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16)
	f := newFixture(t, map[string]string{"big": string(data)})
	os.Chmod(f.base+"/big", 0o640)
	f.fork(Main, "c")
	c := f.br("c")
	usedBefore, _ := f.s.Used()
	real, err := f.s.CopyUp(c, "big")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(real); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("copied-up content: %d bytes, %v", len(got), err)
	}
	if m := f.mode(c, "big"); m != 0o640 {
		t.Errorf("mode %o, want 640", m)
	}
	res, _ := f.s.Resolve(c, "big")
	if res.Depth != len(c.chain) || res.Real != real || res.Ino == 0 {
		t.Errorf("after the copy-up: %+v", res)
	}
	f.s.mu.RLock()
	reserved := f.s.reserved
	f.s.mu.RUnlock()
	used, _ := f.s.Used()
	if reserved != 0 || used-usedBefore < int64(len(data)) || used-usedBefore > int64(len(data))+64<<10 {
		t.Errorf("reserved %d, used grew by %d for %d bytes", reserved, used-usedBefore, len(data))
	}
	if again, err := f.s.CopyUp(c, "big"); err != nil || again != real {
		t.Errorf("second copy-up: %s, %v", again, err)
	}
	ents, _ := os.ReadDir(f.s.tmpDir())
	if len(ents) != 0 {
		t.Errorf("%d copies left in %s", len(ents), f.s.tmpDir())
	}
}

// TestMainCopyAside: main's first write to a file a fork still shows from
// the base moves the base's inode into the fork's snapshot and gives main a
// copy; that copy is made outside the lock. The fork keeps the old bytes
// and inode number, main writes its copy, and no copy is left behind.
func TestMainCopyAside(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16)
	f := newFixture(t, map[string]string{"big": string(data)})
	f.fork(Main, "c")
	c := f.br("c")
	before, _ := f.s.Resolve(c, "big")
	var st0 unix.Stat_t
	unix.Lstat(f.base+"/big", &st0)
	fd, res, err := f.s.OpenFile(f.br(Main), "big", unix.O_WRONLY, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Pwrite(fd, []byte("MAIN"), 0); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	f.s.CloseWrite(res.Writer)
	if got := f.read(c, "big"); got != string(data) {
		t.Errorf("the fork reads %d bytes starting %q, want the old content", len(got), got[:min(len(got), 8)])
	}
	if got := f.baseRead("big"); got != "MAIN"+string(data[4:]) {
		t.Errorf("main reads %d bytes starting %q", len(got), got[:min(len(got), 8)])
	}
	after, _ := f.s.Resolve(c, "big")
	var st unix.Stat_t
	unix.Lstat(after.Real, &st)
	if st.Ino != st0.Ino || (after.Ino != 0 && after.Ino != before.Ino && before.Ino != 0) {
		t.Errorf("the fork's file is inode %d (reported %d), want the base's %d", st.Ino, after.Ino, st0.Ino)
	}
	ents, _ := os.ReadDir(f.s.tmpDir())
	if len(ents) != 0 {
		t.Errorf("%d copies left in %s", len(ents), f.s.tmpDir())
	}
}

// TestMainTruncAfterFork: main's first open with O_TRUNC of a file a fork
// still shows moves the base's inode into the snapshot and gives main an
// empty file with the same metadata (no copy of the data it is about to
// drop: BenchmarkMainTruncAfterFork).
func TestMainTruncAfterFork(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16)
	f := newFixture(t, map[string]string{"big": string(data)})
	os.Chmod(f.base+"/big", 0o640)
	f.fork(Main, "c")
	c := f.br("c")
	fd, res, err := f.s.OpenFile(f.br(Main), "big", unix.O_WRONLY|unix.O_TRUNC, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(fd, []byte("new"))
	unix.Close(fd)
	f.s.CloseWrite(res.Writer)
	if got := f.read(c, "big"); got != string(data) {
		t.Errorf("the fork reads %d bytes, want the old %d", len(got), len(data))
	}
	if got := f.baseRead("big"); got != "new" {
		t.Errorf("main reads %q", got)
	}
	if m := f.mode(f.br(Main), "big"); m != 0o640 {
		t.Errorf("main's file has mode %o, want 640", m)
	}
}
