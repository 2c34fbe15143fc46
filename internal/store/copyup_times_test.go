package store

import (
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestCopyUpKeepsDirTimes: a file written in a branch copies its parent
// directories up; as on Linux (and overlayfs), the directories above the
// file keep their modification times (only a name made or removed in a
// directory changes its own), and each directory a copy-up made an entry
// in is published as changed in its attributes (its ctime moved), for the
// mounts' kernel caches.
func TestCopyUpKeepsDirTimes(t *testing.T) {
	f := newFixture(t, map[string]string{"a/b/c/f": "base", "a/g": "base"})
	old := time.Date(2020, 1, 2, 3, 4, 5, 6, time.UTC)
	for _, d := range []string{"a/b/c", "a/b", "a", ""} {
		if err := os.Chtimes(filepath.Join(f.base, d), old, old); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var attrs []string
	stop := f.s.Watch(func(ev Event) {
		if ev.Attr && ev.Branch == "x" {
			mu.Lock()
			attrs = append(attrs, ev.Path)
			mu.Unlock()
		}
	})
	defer stop()
	f.fork(Main, "x")
	x := f.br("x")
	f.write(x, "a/b/c/f", "in x")                       // an existing file: copied up
	f.write(x, "a/b/c/new", "new")                      // a new name in a/b/c: its mtime changes
	if _, err := f.s.CopyUpMeta(x, "a/g"); err != nil { // a chmod's metadata-only copy in a
		t.Fatal(err)
	}
	for _, d := range []string{"", "a", "a/b"} {
		var st unix.Stat_t
		if _, err := f.s.ResolveStat(x, d, &st); err != nil {
			t.Fatal(err)
		}
		if got := time.Unix(st.Mtim.Unix()); !got.Equal(old) {
			t.Errorf("%q: mtime %v after a copy-up below it, want %v", d, got.UTC(), old)
		}
	}
	var st unix.Stat_t
	if _, err := f.s.ResolveStat(x, "a/b/c", &st); err != nil {
		t.Fatal(err)
	}
	if got := time.Unix(st.Mtim.Unix()); got.Equal(old) {
		t.Errorf("a/b/c: mtime unchanged by the name made in it")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"", "a", "a/b", "a/b/c"} {
		if !slices.Contains(attrs, want) {
			t.Errorf("no attribute event for %q (events %q)", want, attrs)
		}
	}
}
