package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// du is what the store's live layers allocate, walked on disk: the oracle
// for Used.
func du(t *testing.T, s *Store) int64 {
	t.Helper()
	s.mu.RLock()
	var dirs []string
	for _, l := range s.layers {
		if l.made {
			dirs = append(dirs, l.dir)
		}
	}
	s.mu.RUnlock()
	var n int64
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := e.Info()
			if err != nil {
				return err
			}
			n += fi.Sys().(*syscall.Stat_t).Blocks * 512
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// writeFd writes data at off in rel of b as a FUSE write does: a descriptor
// from OpenFile, counted as a writer, closed with CloseWrite.
func writeFd(t *testing.T, s *Store, b *Branch, rel string, data []byte, off int64, create bool) {
	t.Helper()
	fd, res, err := s.OpenFile(b, rel, unix.O_WRONLY, 0o644, create)
	if err != nil {
		t.Fatalf("open %s in %s: %v", rel, b.Name, err)
	}
	if _, err := unix.Pwrite(fd, data, off); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	s.CloseWrite(res.Writer)
}

// checkUsed asserts that Used is what the layers hold on disk and that
// Held shares it out whole.
func checkUsed(t *testing.T, s *Store, when string) int64 {
	t.Helper()
	used, _ := s.Used()
	if d := du(t, s); used != d {
		t.Fatalf("%s: Used %d, du of the layers %d", when, used, d)
	}
	var sum int64
	held := s.Held()
	for _, n := range held {
		sum += n
	}
	if sum != used {
		t.Fatalf("%s: Held %v sums to %d, Used %d", when, held, sum, used)
	}
	return used
}

// TestDiskAccounting: every change the store makes or serves keeps Used
// equal to what its layers allocate, and a reopen recomputes the same.
func TestDiskAccounting(t *testing.T) {
	f := newFixture(t, map[string]string{"a": strings.Repeat("a", 10_000), "d/b": strings.Repeat("b", 5000)})
	if used := checkUsed(t, f.s, "fresh"); used != 0 {
		t.Fatalf("a fresh store holds %d bytes", used)
	}
	f.fork(Main, "c")
	c := f.br("c")
	writeFd(t, f.s, c, "a", make([]byte, 20_000), 0, false) // copy-up, then a write past it
	checkUsed(t, f.s, "write after copy-up")
	writeFd(t, f.s, c, "new", make([]byte, 9000), 0, true)
	checkUsed(t, f.s, "create and write")
	f.mkdir(c, "e")
	f.rename(c, "d", "e/d") // a directory from below: copied up whole
	checkUsed(t, f.s, "mkdir and rename")
	f.rm(c, "new")
	checkUsed(t, f.s, "remove")
	held := f.s.Held()
	if held["c"] == 0 || held[Main] != 0 {
		t.Fatalf("held %v: c wrote, main did not", held)
	}
	f.fork("c", "cc") // freezes c's head
	cc := f.br("cc")
	writeFd(t, f.s, cc, "a", make([]byte, 4096), 30_000, false)
	checkUsed(t, f.s, "write in a fork of a fork")
	f.commit("cc", false)
	checkUsed(t, f.s, "commit into a branch")
	// main writes the base; what it preserves for a snapshot is counted.
	f.fork(Main, "m")
	before, _ := f.s.Used()
	writeFd(t, f.s, f.br(Main), "a", make([]byte, 100), 0, false)
	after := checkUsed(t, f.s, "main's write preserved into the snapshot")
	if after <= before || f.s.Held()[Main] == 0 {
		t.Fatalf("main's write preserved nothing: %d -> %d bytes, held %v", before, after, f.s.Held())
	}
	f.write(f.br("m"), "x", "x")
	used := checkUsed(t, f.s, "before reopen")
	f.reopen()
	if got := checkUsed(t, f.s, "after reopen"); got != used {
		t.Fatalf("after reopen Used %d, before %d", got, used)
	}
	if err := f.s.Abort("c"); err != nil {
		t.Fatal(err)
	}
	checkUsed(t, f.s, "after abort")
	f.fork(Main, "m2")
	writeFd(t, f.s, f.br("m2"), "a", make([]byte, 50_000), 0, false)
	checkUsed(t, f.s, "before a commit into main")
	f.commit("m2", false)
	checkUsed(t, f.s, "after a commit into main")
}

// TestDiskSampler: a write the store does not see (passthrough's) is
// counted within SampleEvery, while the descriptor is still open.
func TestDiskSampler(t *testing.T) {
	f := newFixture(t, nil)
	f.s.Close()
	s, err := Open(Config{Dir: f.dir, Base: f.base, SampleEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.s = s
	f.fork(Main, "c")
	fd, _, err := s.OpenFile(f.br("c"), "f", unix.O_WRONLY, 0o644, true)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if _, err := unix.Pwrite(fd, make([]byte, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Second)
	for {
		used, _ := s.Used()
		if used >= 1<<20 && used == du(t, s) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a second after a 1 MiB write: Used %d, du %d", used, du(t, s))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDiskLimit: what would pass the limit fails with ENOSPC and changes
// nothing; what fits goes through.
func TestDiskLimit(t *testing.T) {
	f := newFixture(t, map[string]string{"big": strings.Repeat("b", 64<<10), "small": "s"})
	f.fork(Main, "c")
	c := f.br("c")
	if err := f.s.SetLimit(-1); err == nil {
		t.Fatal("a negative limit was taken")
	}
	if err := f.s.SetLimit(40 << 10); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.CopyUp(c, "big"); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("copy-up of 64 KiB under a limit of 40 KiB: %v, want ENOSPC", err)
	}
	if r, err := f.s.Resolve(c, "big"); err != nil || r.Depth != 0 {
		t.Fatalf("after the refused copy-up big resolves to %+v, %v: want the base", r, err)
	}
	writeFd(t, f.s, c, "small", []byte("ss"), 0, false)
	used := checkUsed(t, f.s, "small copied up")
	if used == 0 || used > 40<<10 {
		t.Fatalf("used %d", used)
	}
	// Reserve: a served write that does not fit is refused before it is made.
	room := int64(40<<10) - used
	if _, err := f.s.Reserve(c, 0, room+1); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("reserve of %d with %d left: %v, want ENOSPC", room+1, room, err)
	}
	r, err := f.s.Reserve(c, 0, room)
	if err != nil {
		t.Fatalf("reserve of all that is left: %v", err)
	}
	if err := f.s.Create(c, "dir", true, byPath(func(real string) error { return os.Mkdir(real, 0o755) })); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("mkdir while the rest is reserved: %v, want ENOSPC", err)
	}
	f.s.Settle(filepath.Join(f.dir, "none"), r, 0)
	if err := f.s.Create(c, "dir", true, byPath(func(real string) error { return os.Mkdir(real, 0o755) })); err != nil {
		t.Fatalf("mkdir after the reservation ended: %v", err)
	}
	// Passthrough for writers only with room: never under a small limit.
	if f.s.WritePassthrough(c) {
		t.Error("a writer gets passthrough with 40 KiB of limit")
	}
	if !f.s.WritePassthrough(f.br(Main)) || f.s.Metered(f.br(Main)) {
		t.Error("main writes the base: it is neither metered nor denied passthrough")
	}
	if !f.s.Metered(c) {
		t.Error("c is not metered under a limit")
	}
	// main's write that would preserve more than fits into a snapshot fails
	// and leaves the base as it was.
	if err := f.s.SetLimit(used + 8192); err != nil {
		t.Fatal(err)
	}
	f.fork(Main, "m")
	if _, _, err := f.s.OpenFile(f.br(Main), "big", unix.O_WRONLY, 0, false); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("main's open of big for writing, whose preserve does not fit: %v, want ENOSPC", err)
	}
	if got := readIn(f.s, f.br("m"), "big"); got != strings.Repeat("b", 64<<10) {
		t.Fatalf("the snapshot's big changed: %d bytes", len(got))
	}
	checkUsed(t, f.s, "refused preserve")
	// No limit: everything passes and writers get passthrough again.
	if err := f.s.SetLimit(0); err != nil {
		t.Fatal(err)
	}
	if !f.s.WritePassthrough(c) || f.s.Metered(c) {
		t.Error("without a limit a writer is still metered")
	}
	if _, err := f.s.CopyUp(c, "big"); err != nil {
		t.Fatal(err)
	}
	checkUsed(t, f.s, "no limit")
}

// TestAllocGrowth: the estimate of what a write allocates is never below
// what it does.
func TestAllocGrowth(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name       string
		size, hole int64 // the file's length, and a hole punched at its start of this length
		off, n     int64
	}{
		{"append", 10_000, 0, 10_000, 5000},
		{"overwrite", 10_000, 0, 0, 4096},
		{"past the end", 10_000, 0, 50_000, 100},
		{"into a hole", 64 << 10, 32 << 10, 0, 8192},
		{"empty file", 0, 0, 0, 1},
		{"big", 0, 0, 0, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(p, make([]byte, tc.size), 0o644); err != nil {
				t.Fatal(err)
			}
			fd, err := unix.Open(p, unix.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			unix.Fsync(fd)
			if tc.hole > 0 {
				if err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, tc.hole); err != nil {
					t.Skipf("punch hole: %v", err)
				}
			}
			var st unix.Stat_t
			unix.Fstat(fd, &st)
			est := AllocGrowth(&st, tc.off, tc.n)
			if _, err := unix.Pwrite(fd, make([]byte, tc.n), tc.off); err != nil {
				t.Fatal(err)
			}
			unix.Fsync(fd)
			var after unix.Stat_t
			unix.Fstat(fd, &after)
			if grew := (after.Blocks - st.Blocks) * 512; grew > est {
				t.Fatalf("estimated %d, allocated %d", est, grew)
			}
		})
	}
}

// TestDiskDirGrowth: a directory that grows with the names made in it is
// counted as it grows, not only at the next Open.
func TestDiskDirGrowth(t *testing.T) {
	files := map[string]string{}
	for i := range 300 {
		files[filepath.Join("d", strings.Repeat("n", 40)+strconv.Itoa(i))] = "x"
	}
	f := newFixture(t, files)
	f.fork(Main, "c")
	c := f.br("c")
	for i := range 300 {
		name := strings.Repeat("m", 40) + strconv.Itoa(i)
		if err := f.s.Create(c, name, false, byPath(func(real string) error { return os.WriteFile(real, nil, 0o600) })); err != nil {
			t.Fatal(err)
		}
		f.rm(c, filepath.Join("d", strings.Repeat("n", 40)+strconv.Itoa(i))) // a whiteout in d each
	}
	checkUsed(t, f.s, "after 300 names in the layer's root and 300 whiteouts in d")
}

// TestDiskTruncOpen: an open with O_TRUNC of a lower file copies up none of
// its data, so it works in a tree with no room for the data, and keeps the
// file's metadata.
func TestDiskTruncOpen(t *testing.T) {
	f := newFixture(t, map[string]string{"big": strings.Repeat("b", 256<<10)})
	if err := os.Chmod(filepath.Join(f.base, "big"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(filepath.Join(f.base, "big"), "user.k", []byte("v"), 0); err != nil {
		t.Skipf("user xattrs: %v", err)
	}
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if err := os.Chtimes(filepath.Join(f.base, "big"), old, old); err != nil {
		t.Fatal(err)
	}
	f.fork(Main, "c")
	c := f.br("c")
	if err := f.s.SetLimit(64 << 10); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.s.OpenFile(c, "big", unix.O_WRONLY, 0, false); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("open for writing of 256 KiB under a limit of 64 KiB: %v, want ENOSPC", err)
	}
	fd, res, err := f.s.OpenFile(c, "big", unix.O_WRONLY|unix.O_TRUNC, 0, false)
	if err != nil {
		t.Fatalf("open with O_TRUNC: %v", err)
	}
	var st unix.Stat_t
	unix.Fstat(fd, &st)
	if mt := time.Unix(st.Mtim.Unix()); !mt.After(old.Add(time.Hour)) {
		t.Errorf("mtime %v after an open with O_TRUNC, as old as the lower file's", mt)
	}
	unix.Write(fd, []byte("new"))
	unix.Close(fd)
	f.s.CloseWrite(res.Writer)
	if got := readIn(f.s, c, "big"); got != "new" {
		t.Fatalf("big = %q after O_TRUNC and a write", got)
	}
	if m := f.mode(c, "big"); m.Perm() != 0o640 {
		t.Fatalf("mode %v after the copy-up, want 0640", m)
	}
	if v, err := unix.Getxattr(res.Real, "user.k", make([]byte, 8)); err != nil || v != 1 {
		t.Fatalf("xattr after the copy-up: %d, %v", v, err)
	}
	if got := readIn(f.s, f.br(Main), "big"); len(got) != 256<<10 {
		t.Fatalf("main's big changed: %d bytes", len(got))
	}
	checkUsed(t, f.s, "after the truncating copy-up")
}
