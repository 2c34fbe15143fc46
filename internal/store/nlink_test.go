package store

import (
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDirLinks: a merged directory's link count is 2 plus its
// subdirectories in the view, through every change that can alter it, and
// a directory held by one real directory is left to that one's own count.
func TestDirLinks(t *testing.T) {
	f := newFixture(t, map[string]string{"d/a/": "", "d/b/": "", "d/f": "x", "solo/x/": ""})
	f.fork(Main, "b")
	b := f.br("b")
	want := func(rel string, n uint32, merged bool) {
		t.Helper()
		got, m, err := f.s.DirLinks(b, rel)
		if err != nil || m != merged || (merged && got != n) {
			t.Fatalf("DirLinks(%q) = %d, merged %v, %v; want %d, merged %v", rel, got, m, err, n, merged)
		}
	}
	want("d", 0, false)    // only in the base
	want("solo", 0, false) // only in the base
	f.write(b, "d/new", "x")
	want("d", 4, true) // a, b: the head and the base merge now
	f.mkdir(b, "d/c")
	want("d", 5, true)
	for i := range 50 {
		f.write(b, "d/file"+string(rune('A'+i%26))+string(rune('a'+i/26)), "x")
	}
	want("d", 5, true) // files keep it
	f.rm(b, "d/a")
	want("d", 4, true)
	f.rename(b, "d/b", "d/b2")
	want("d", 4, true)
	f.rename(b, "d/b2", "solo/b2")
	want("d", 3, true)
	want("solo", 4, true) // x, b2
	f.mkdir(b, "fresh")
	f.mkdir(b, "fresh/sub")
	want("fresh", 0, false) // only in the head: its own count is right
	want("", 5, true)       // the root: d, solo, fresh, and the base's
	if _, _, err := f.s.DirLinks(b, "d/f"); err != syscall.ENOTDIR {
		t.Fatalf("DirLinks of a file: %v", err)
	}
	// A fork and a commit change views: b's child sees the same, and after
	// its commit b shows the child's directories.
	f.fork("b", "c")
	c := f.br("c")
	f.mkdir(c, "d/e")
	if n, m, err := f.s.DirLinks(c, "d"); err != nil || !m || n != 4 {
		t.Fatalf("c: DirLinks(d) = %d %v %v, want 4", n, m, err)
	}
	f.commit("c", false)
	want("d", 4, true)
	// The count agrees with the directory's subdirectories as listed.
	ents, err := f.s.ReadDir(b, "d")
	if err != nil {
		t.Fatal(err)
	}
	dirs := 0
	for _, e := range ents {
		if e.Mode == syscall.S_IFDIR {
			dirs++
		}
	}
	if dirs+2 != 4 {
		t.Fatalf("listing has %d subdirectories: %v", dirs, ents)
	}
}

// TestResolveStat: ResolveStat's stat is the lstat of Res.Real, whether
// the path comes from the base (where resolving lstats it already), a
// layer, or is the root.
func TestResolveStat(t *testing.T) {
	f := newFixture(t, map[string]string{"d/base": "base", "d/changed": "old"})
	f.fork(Main, "b")
	b := f.br("b")
	f.write(b, "d/changed", "new data")
	f.write(b, "d/new", "n")
	for _, rel := range []string{"", "d", "d/base", "d/changed", "d/new"} {
		var st, want unix.Stat_t
		res, err := f.s.ResolveStat(b, rel, &st)
		if err != nil {
			t.Fatalf("%q: %v", rel, err)
		}
		if err := unix.Lstat(res.Real, &want); err != nil {
			t.Fatal(err)
		}
		if st.Ino != want.Ino || st.Size != want.Size || st.Mode != want.Mode {
			t.Errorf("%q: stat ino %d size %d mode %o, lstat of %s: ino %d size %d mode %o", rel, st.Ino, st.Size, st.Mode, res.Real, want.Ino, want.Size, want.Mode)
		}
	}
	var st unix.Stat_t
	if _, err := f.s.ResolveStat(b, "d/missing", &st); err != syscall.ENOENT {
		t.Fatalf("missing: %v", err)
	}
}
