package cowfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/store"
	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// hour is a cache timeout no test waits out: what a test sees fresh, an
// invalidation brought.
const hour = time.Hour

// mountStore mounts st at a new directory showing branch, caching for ttl.
func mountStore(t *testing.T, st *store.Store, branch string, ttl time.Duration) (*FS, string) {
	t.Helper()
	mnt := t.TempDir()
	f, err := Mount(Config{Store: st, Mountpoint: mnt, Branch: branch, CacheTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(true); err != nil {
			t.Error(err)
		}
	})
	return f, mnt
}

func newStore(t *testing.T, setup func(base string)) *store.Store {
	t.Helper()
	testenv.NeedFUSE(t)
	base := t.TempDir()
	if setup != nil {
		setup(base)
	}
	st, err := store.Open(store.Config{Dir: t.TempDir(), Base: base})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// eventually polls cond for up to 2 s (invalidations are sent
// asynchronously, within microseconds; the cache timeout is an hour).
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		ok, got := cond()
		if ok {
			return
		}
		last = got
	}
	t.Fatalf("%s: still %s", what, last)
}

func sizeIs(p string, want int64) func() (bool, string) {
	return func() (bool, string) {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return false, err.Error()
		}
		return st.Size == want, "size " + itoa(int(st.Size))
	}
}

func exists(p string, want bool) func() (bool, string) {
	return func() (bool, string) {
		_, err := os.Lstat(p)
		if want {
			return err == nil, "absent"
		}
		return os.IsNotExist(err), "present"
	}
}

func listed(dir, name string, want bool) func() (bool, string) {
	return func() (bool, string) {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return false, err.Error()
		}
		has := slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() == name })
		if has == want {
			return true, ""
		}
		return false, "listing has " + name + ": " + map[bool]string{true: "yes", false: "no"}[has]
	}
}

// TestOtherViewsSeeChanges: with an hour's cache timeout, each change made
// through one view shows at once in every other view of the same branch:
// the root and /@b of one mount, and another mount of the same store.
func TestOtherViewsSeeChanges(t *testing.T) {
	st := newStore(t, func(b string) {
		os.WriteFile(filepath.Join(b, "f"), []byte("base"), 0o644)
		os.Mkdir(filepath.Join(b, "d"), 0o755)
		os.WriteFile(filepath.Join(b, "d", "old"), []byte("old"), 0o644)
	})
	if err := st.Fork(store.Main, "b"); err != nil {
		t.Fatal(err)
	}
	_, m1 := mountStore(t, st, "b", hour)
	_, m2 := mountStore(t, st, "b", hour)
	writer := filepath.Join(m1, "@b")
	for _, seen := range []string{m1, m2} {
		// Fill the caches: names present and absent, attributes, listings.
		for _, p := range []string{"f", "d/old", "d/new", "g"} {
			os.Lstat(filepath.Join(seen, p))
		}
		os.ReadDir(filepath.Join(seen, "d"))
	}
	if err := os.WriteFile(filepath.Join(writer, "f"), []byte("changed in b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(writer, "d", "new"), []byte("n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(writer, "d", "old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(writer, "f"), filepath.Join(writer, "g")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(writer, "g"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, seen := range []string{m1, m2} {
		eventually(t, seen+": g's size", sizeIs(filepath.Join(seen, "g"), int64(len("changed in b"))))
		eventually(t, seen+": f renamed away", exists(filepath.Join(seen, "f"), false))
		eventually(t, seen+": d/new made", exists(filepath.Join(seen, "d", "new"), true))
		eventually(t, seen+": d/old removed", exists(filepath.Join(seen, "d", "old"), false))
		eventually(t, seen+": d lists new", listed(filepath.Join(seen, "d"), "new", true))
		eventually(t, seen+": d lists no old", listed(filepath.Join(seen, "d"), "old", false))
		eventually(t, seen+": g's mode", func() (bool, string) {
			fi, err := os.Lstat(filepath.Join(seen, "g"))
			if err != nil {
				return false, err.Error()
			}
			return fi.Mode().Perm() == 0o600, fi.Mode().String()
		})
	}
	// main's views saw none of it.
	if d, err := os.ReadFile(filepath.Join(m2, "@main", "f")); err != nil || string(d) != "base" {
		t.Fatalf("main's f: %q %v", d, err)
	}
}

// TestWriterSeenWhileOpen: a file held open for writing through one view
// shows its growing size in another view while it is open (passthrough
// writes make no request the daemon could report).
func TestWriterSeenWhileOpen(t *testing.T) {
	st := newStore(t, func(b string) { os.WriteFile(filepath.Join(b, "log"), nil, 0o644) })
	if err := st.Fork(store.Main, "b"); err != nil {
		t.Fatal(err)
	}
	_, m1 := mountStore(t, st, "b", hour)
	_, m2 := mountStore(t, st, "b", hour)
	other := filepath.Join(m2, "log")
	os.Lstat(other)
	f, err := os.OpenFile(filepath.Join(m1, "log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i := 1; i <= 3; i++ {
		if _, err := f.Write([]byte("0123456789")); err != nil {
			t.Fatal(err)
		}
		eventually(t, "size while open", sizeIs(other, int64(10*i)))
	}
}

// TestCommitAndAbortReachViews: a commit into the branch a mount shows, and
// an abort of a branch it shows through /@NAME, show at once.
func TestCommitAndAbortReachViews(t *testing.T) {
	st := newStore(t, func(b string) { os.WriteFile(filepath.Join(b, "f"), []byte("base"), 0o644) })
	for _, fk := range [][2]string{{store.Main, "b"}, {"b", "c"}, {"b", "x"}} {
		if err := st.Fork(fk[0], fk[1]); err != nil {
			t.Fatal(err)
		}
	}
	_, mnt := mountStore(t, st, "b", hour)
	_, other := mountStore(t, st, "b", hour)
	c, x := filepath.Join(other, "@c"), filepath.Join(mnt, "@x")
	if err := os.WriteFile(filepath.Join(c, "f"), []byte("from c"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(c, "new"), []byte("c"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(x, "mine"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"f", "new"} {
		os.Lstat(filepath.Join(mnt, p))
	}
	os.ReadDir(mnt)
	if _, err := st.Commit("c", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "f's size after the commit", sizeIs(filepath.Join(mnt, "f"), int64(len("from c"))))
	eventually(t, "new after the commit", exists(filepath.Join(mnt, "new"), true))
	eventually(t, "the root lists new", listed(mnt, "new", true))
	if d, err := os.ReadFile(filepath.Join(mnt, "f")); err != nil || string(d) != "from c" {
		t.Fatalf("f after the commit: %q %v", d, err)
	}
	// x is stale now: its view still reads its own files (they can be
	// rescued) and refuses changes.
	if d, err := os.ReadFile(filepath.Join(x, "mine")); err != nil || string(d) != "x" {
		t.Fatalf("the stale view: %q, %v; want its own file", d, err)
	}
	if err := os.WriteFile(filepath.Join(x, "mine"), []byte("late"), 0o644); !errors.Is(err, unix.ESTALE) {
		t.Fatalf("a write to the stale view: %v, want ESTALE", err)
	}
	if err := st.Abort("x"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the aborted view", exists(filepath.Join(x, "mine"), false))
}

// TestNotifierOverflow: past maxQueued events waiting, a mount's notifier
// drops them and invalidates everything its kernel knows instead; no view
// is left stale.
func TestNotifierOverflow(t *testing.T) {
	st := newStore(t, func(b string) { os.WriteFile(filepath.Join(b, "f"), []byte("base"), 0o644) })
	if err := st.Fork(store.Main, "b"); err != nil {
		t.Fatal(err)
	}
	f2, m2 := mountStore(t, st, "b", hour)
	_, m1 := mountStore(t, st, "b", hour)
	seen := filepath.Join(m2, "f")
	os.Lstat(seen)
	os.Lstat(filepath.Join(m2, "new"))
	// Flood the queue, then change f and make new through the other mount.
	for i := range 2 * maxQueued {
		st.Publish(store.Event{Branch: "elsewhere", Path: fmt.Sprint("x", i)})
	}
	if err := os.WriteFile(filepath.Join(m1, "f"), []byte("changed in b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m1, "new"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "f after the flood", sizeIs(seen, int64(len("changed in b"))))
	eventually(t, "new after the flood", exists(filepath.Join(m2, "new"), true))
	if f2.nt.overflow.Load() {
		t.Log("still flagged: the notifier has not reached the flag yet")
	}
}

// TestPartialListings: directories whose listing a reader stops reading
// early (past maxDirReads of them) leave no handle behind that breaks a
// later listing, and every full listing is whole.
func TestPartialListings(t *testing.T) {
	const dirs, per = maxDirReads + 44, 40
	st := newStore(t, func(b string) {
		for d := range dirs {
			dir := filepath.Join(b, fmt.Sprint("d", d))
			os.Mkdir(dir, 0o755)
			for i := range per {
				os.WriteFile(filepath.Join(dir, fmt.Sprint("f", i)), nil, 0o644)
			}
		}
	})
	_, mnt := mountStore(t, st, store.Main, hour)
	buf := make([]byte, 512) // a few entries only
	var fds []int
	for d := range dirs {
		fd, err := unix.Open(filepath.Join(mnt, fmt.Sprint("d", d)), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := unix.Getdents(fd, buf); err != nil || n == 0 {
			t.Fatalf("getdents d%d: %d %v", d, n, err)
		}
		fds = append(fds, fd)
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	for d := range dirs {
		ents, err := os.ReadDir(filepath.Join(mnt, fmt.Sprint("d", d)))
		if err != nil || len(ents) != per {
			t.Fatalf("d%d: %d entries, %v; want %d", d, len(ents), err, per)
		}
	}
}
