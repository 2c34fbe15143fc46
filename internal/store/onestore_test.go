package store

import (
	"errors"
	"testing"

	"github.com/arbor-dev/arbor/api"
)

// TestTwoStoresOneBase: two stores over one base would break snapshot
// isolation (each one's origin copy-on-write knows only its own
// snapshots): store B forks c, store A commits a change to a file into
// main, and c would read the new content. The second Open is refused
// instead; if it were not, c must still read what it forked.
func TestTwoStoresOneBase(t *testing.T) {
	f := newFixture(t, map[string]string{"f": "old"})
	a := f.s
	b, err := Open(Config{Dir: t.TempDir(), Base: f.base})
	if err == nil {
		defer b.Close()
		if err := b.Fork(Main, "c"); err != nil {
			t.Fatal(err)
		}
		if err := a.Fork(Main, "x"); err != nil {
			t.Fatal(err)
		}
		x, _ := a.Branch("x")
		if err := writeErr(a, x, "f", "new"); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Commit("x", false); err != nil {
			t.Fatal(err)
		}
		c, _ := b.Branch("c")
		if got := readIn(b, c, "f"); got != "old" {
			t.Fatalf("a fork of store B reads %q after store A committed into main, want %q: two stores over one base", got, "old")
		}
		return
	}
	if !errors.Is(err, api.ErrBusy) {
		t.Fatalf("second store over one base: %v, want api.ErrBusy", err)
	}
	t.Logf("refused: %v", err)
	// Once A is closed the base is free again.
	a.Close()
	f.s = nil
	b, err = Open(Config{Dir: t.TempDir(), Base: f.base})
	if err != nil {
		t.Fatalf("open after the holder closed: %v", err)
	}
	b.Close()
}
