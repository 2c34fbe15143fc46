package cowfs

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/arbor-dev/arbor/internal/store"
	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// dirInos returns the d_ino of every name in dir, read with getdents64.
func dirInos(t *testing.T, dir string) map[string]uint64 {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	out := map[string]uint64{}
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatalf("getdents %s: %v", dir, err)
		}
		if n == 0 {
			return out
		}
		for b := buf[:n]; len(b) > 0; {
			// struct linux_dirent64 { u64 ino; s64 off; u16 reclen; u8 type; char name[]; }
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			name := b[19:reclen]
			if i := slices.Index(name, 0); i >= 0 {
				name = name[:i]
			}
			out[string(name)] = binary.NativeEndian.Uint64(b[0:8])
			b = b[reclen:]
		}
	}
}

// baseInos returns the inode numbers of paths in the base directory.
func baseInos(t *testing.T, base string, paths []string) map[string]uint64 {
	want := map[string]uint64{}
	for _, p := range paths {
		want[p] = lstatIno(t, filepath.Join(base, p))
	}
	return want
}

// checkInos looks every path up in view (fresh where the kernel never saw
// it) and lists its directory: st_ino and d_ino must be want's.
func checkInos(t *testing.T, what, view string, paths []string, want map[string]uint64) {
	t.Helper()
	for _, p := range paths {
		full := filepath.Join(view, p)
		if got := lstatIno(t, full); got != want[p] {
			t.Errorf("%s: %s: st_ino %d, want %d", what, p, got, want[p])
		}
		if got, ok := dirInos(t, filepath.Dir(full))[filepath.Base(p)]; !ok || got != want[p] {
			t.Errorf("%s: %s: d_ino %d (listed %v), want %d", what, p, got, ok, want[p])
		}
	}
}

func lstatIno(t *testing.T, p string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestDirInoStable: a directory keeps the inode number it had before a
// copy-up (the base's), as a file does, wherever it is looked up fresh: a
// new view (a fork child, a second mount, which the kernel has no cache
// of), after a commit into its parent, and after the store is closed and
// opened again (a daemon restart). readdir's d_ino agrees with st_ino.
// Before, a fresh lookup reported the head copy's real inode: mathy's
// st_ino changed between a node and its fork child.
func TestDirInoStable(t *testing.T) {
	st := newStore(t, func(b string) {
		os.MkdirAll(filepath.Join(b, "ws/mathy/sub"), 0o755)
		os.WriteFile(filepath.Join(b, "ws/mathy/__init__.py"), []byte("x"), 0o644)
		os.WriteFile(filepath.Join(b, "ws/mathy/sub/x"), []byte("x"), 0o644)
	})
	base := st.Base()
	paths := []string{"ws", "ws/mathy", "ws/mathy/sub", "ws/mathy/__init__.py", "ws/mathy/sub/x"}
	want := baseInos(t, base, paths)
	check := func(what, view string, paths []string, want map[string]uint64) {
		t.Helper()
		checkInos(t, what, view, paths, want)
	}

	f, mnt := mountStore(t, st, "", 0)
	if err := st.Fork(store.Main, "a"); err != nil {
		t.Fatal(err)
	}
	// A write two levels inside mathy copies ws, mathy and sub up into a's head.
	if err := os.WriteFile(filepath.Join(mnt, "@a/ws/mathy/sub/new"), []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check("a, the view written", filepath.Join(mnt, "@a"), paths, want)
	_, mnt2 := mountStore(t, st, "a", 0)
	check("a, a second mount", mnt2, paths, want)

	// A directory made in a, then copied up in a fork child of a: the
	// child reports the number it has in a.
	if err := os.Mkdir(filepath.Join(mnt, "@a/ws/made"), 0o755); err != nil {
		t.Fatal(err)
	}
	want["ws/made"] = lstatIno(t, filepath.Join(mnt, "@a/ws/made"))
	want["ws/mathy/sub/new"] = lstatIno(t, filepath.Join(mnt, "@a/ws/mathy/sub/new"))
	if err := st.Fork("a", "b"); err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(paths), "ws/made", "ws/mathy/sub/new")
	check("b before a write", filepath.Join(mnt, "@b"), all, want)
	// In one view across a copy-up of something inside: mathy/sub in b is
	// copied up from a's layer, ws/made from a's too.
	for _, p := range []string{"ws/mathy/sub/b", "ws/made/b"} {
		if err := os.WriteFile(filepath.Join(mnt, "@b", p), []byte("b"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	check("b after a write", filepath.Join(mnt, "@b"), all, want)
	_, mnt3 := mountStore(t, st, "b", 0)
	check("b, a second mount", mnt3, all, want)

	// Commit b into a: a's view reports the same numbers.
	if _, err := f.Commit("b", true); err != nil {
		t.Fatal(err)
	}
	_, mnt4 := mountStore(t, st, "a", 0)
	check("a after b committed into it", mnt4, all, want)
	check("a after b committed into it, first view", filepath.Join(mnt, "@a"), all, want)

	// Commit a into main: the base's directories are the same ones.
	if _, err := f.Commit("a", true); err != nil {
		t.Fatal(err)
	}
	_, mnt5 := mountStore(t, st, "", 0)
	kept := append(slices.Clone(paths), "ws/mathy/sub/new")
	check("main after a committed", mnt5, kept, want)
	check("main after a committed, first view", filepath.Join(mnt, "@main"), kept, want)
}

// TestDirInoStableRestart: the numbers copied-up directories report survive
// the store being closed and opened again (the daemon restarting), which
// rebuilds its index from the layers on disk.
func TestDirInoStableRestart(t *testing.T) {
	testenv.NeedFUSE(t)
	base, dir := t.TempDir(), t.TempDir()
	os.MkdirAll(filepath.Join(base, "ws/mathy/sub"), 0o755)
	os.WriteFile(filepath.Join(base, "ws/mathy/sub/x"), []byte("x"), 0o644)
	paths := []string{"ws", "ws/mathy", "ws/mathy/sub", "ws/mathy/sub/x"}
	want := baseInos(t, base, paths)
	for round := range 2 {
		st, err := store.Open(store.Config{Dir: dir, Base: base})
		if err != nil {
			t.Fatal(err)
		}
		mnt := t.TempDir()
		f, err := Mount(Config{Store: st, Mountpoint: mnt, Branch: "a"})
		if round == 0 {
			if err == nil {
				t.Fatal("mounted branch a before it was made")
			}
			f, err = Mount(Config{Store: st, Mountpoint: mnt})
			if err == nil {
				if err = st.Fork(store.Main, "a"); err == nil {
					err = os.WriteFile(filepath.Join(mnt, "@a/ws/mathy/sub/new"), nil, 0o644)
				}
				mnt = filepath.Join(mnt, "@a")
			}
		}
		if err != nil {
			st.Close()
			t.Fatal(err)
		}
		checkInos(t, fmt.Sprint("round ", round), mnt, paths, want)
		if err := f.Unmount(true); err != nil {
			t.Error(err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
