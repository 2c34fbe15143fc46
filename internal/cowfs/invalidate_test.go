package cowfs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/arbor-dev/arbor/internal/store"
)

// TestRootInvalidation: after the root changes branch (a switch, a create
// through the control file, a commit into the branch it shows), every name
// the kernel knows under the root, present or absent, shows the new view at
// once, without waiting for a cache timeout.
func TestRootInvalidation(t *testing.T) {
	for _, c := range []struct {
		name   string
		misses int // extra absent names looked up first (past maxRootNeg: the listing fallback)
	}{
		{"few", 0},
		{"overflow", maxRootNeg + 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, _, mnt := mount(t, func(b string) {
				os.WriteFile(filepath.Join(b, "kept"), []byte("base"), 0o644)
				os.WriteFile(filepath.Join(b, "gone"), []byte("base"), 0o644)
			})
			st := f.Store()
			for i := range c.misses {
				if _, err := os.Lstat(filepath.Join(mnt, fmt.Sprintf("miss%d", i))); !os.IsNotExist(err) {
					t.Fatalf("miss%d: %v", i, err)
				}
			}
			// The kernel now knows "kept" and "gone" as present, "new" as absent.
			for _, n := range []string{"kept", "gone"} {
				if _, err := os.Lstat(filepath.Join(mnt, n)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := os.Lstat(filepath.Join(mnt, "new")); !os.IsNotExist(err) {
				t.Fatalf("new before: %v", err)
			}
			// A branch that adds "new", removes "gone", changes "kept".
			if err := st.Fork(store.Main, "b"); err != nil {
				t.Fatal(err)
			}
			view := filepath.Join(mnt, "@b")
			if err := os.WriteFile(filepath.Join(view, "new"), []byte("b"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(filepath.Join(view, "gone")); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(view, "kept"), []byte("in b"), 0o644); err != nil {
				t.Fatal(err)
			}
			check := func(when, kept string) {
				t.Helper()
				if d, err := os.ReadFile(filepath.Join(mnt, "new")); err != nil || string(d) != "b" {
					t.Errorf("%s: new: %q %v", when, d, err)
				}
				if _, err := os.Lstat(filepath.Join(mnt, "gone")); !os.IsNotExist(err) {
					t.Errorf("%s: gone: %v", when, err)
				}
				if d, err := os.ReadFile(filepath.Join(mnt, "kept")); err != nil || string(d) != kept {
					t.Errorf("%s: kept: %q %v", when, d, err)
				}
			}
			if err := os.WriteFile(filepath.Join(mnt, ctlName), []byte("switch:b"), 0); err != nil {
				t.Fatal(err)
			}
			check("after switch", "in b")
			// Back to main (which still lacks "new"), then the commit of b
			// into main brings b's view to the root again.
			if err := os.WriteFile(filepath.Join(mnt, ctlName), []byte("switch:main"), 0); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(filepath.Join(mnt, "new")); !os.IsNotExist(err) {
				t.Fatalf("new in main before the commit: %v", err)
			}
			if err := os.WriteFile(filepath.Join(view, ctlName), []byte("commit"), 0); err != nil {
				t.Fatal(err)
			}
			check("after commit", "in b")
		})
	}
}

// TestViewMissNotCached: a lookup of /@NAME before the branch exists does
// not hide the branch once it is made.
func TestViewMissNotCached(t *testing.T) {
	f, _, mnt := mount(t, nil)
	if _, err := os.Lstat(filepath.Join(mnt, "@later")); !os.IsNotExist(err) {
		t.Fatalf("@later before: %v", err)
	}
	if err := f.Store().Fork(store.Main, "later"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(mnt, "@later")); err != nil {
		t.Fatalf("@later after the fork: %v", err)
	}
}
