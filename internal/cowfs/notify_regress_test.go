// Regression tests from the review of the kernel-cache invalidation
// (notify.go): each failed before its fix.

package cowfs

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/arbor-dev/arbor/internal/store"
)

// A branch whose name contains '@' never gets invalidations in its /@NAME view.
func TestReviewAtInBranchName(t *testing.T) {
	st := newStore(t, func(b string) { os.WriteFile(filepath.Join(b, "f"), []byte("base"), 0o644) })
	if err := st.Fork(store.Main, "a@b"); err != nil {
		t.Fatal(err)
	}
	_, m1 := mountStore(t, st, "a@b", hour)
	_, m2 := mountStore(t, st, store.Main, hour)
	view := filepath.Join(m2, "@a@b")
	os.Lstat(filepath.Join(view, "f"))
	os.Lstat(filepath.Join(view, "new"))
	if err := os.WriteFile(filepath.Join(m1, "f"), []byte("changed!"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(m1, "new"), nil, 0o644)
	eventually(t, "new in @a@b", exists(filepath.Join(view, "new"), true))
	eventually(t, "f size in @a@b", sizeIs(filepath.Join(view, "f"), 8))
}

// After an abort, /@x is gone; a re-created x shows through it again.
func TestReviewAbortRecreate(t *testing.T) {
	st := newStore(t, nil)
	if err := st.Fork(store.Main, "x"); err != nil {
		t.Fatal(err)
	}
	_, mnt := mountStore(t, st, store.Main, hour)
	x := filepath.Join(mnt, "@x")
	if err := os.WriteFile(filepath.Join(x, "old"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := st.Abort("x"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "@x after the abort", exists(x, false))
	if err := st.Fork(store.Main, "x"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(x, "new"), []byte("x"), 0o644); err != nil {
		t.Errorf("write into re-created x: %v", err)
	}
	ents, err := os.ReadDir(x)
	t.Logf("readdir @x after re-create: %d %v", len(ents), err)
}

// A negative entry directly under a /@p view survives a commit into p that
// publishes All (more than maxCommitPaths paths).
func TestReviewNegativeUnderViewAfterBigCommit(t *testing.T) {
	st := newStore(t, nil)
	for _, fk := range [][2]string{{store.Main, "p"}, {"p", "c"}} {
		if err := st.Fork(fk[0], fk[1]); err != nil {
			t.Fatal(err)
		}
	}
	_, mnt := mountStore(t, st, store.Main, hour)
	p := filepath.Join(mnt, "@p")
	if _, err := os.Lstat(filepath.Join(p, "new")); err == nil {
		t.Fatal("new exists")
	}
	c := filepath.Join(p, "@c")
	for i := 0; i < 300; i++ {
		os.WriteFile(filepath.Join(c, fmt.Sprint("f", i)), nil, 0o644)
	}
	os.WriteFile(filepath.Join(c, "new"), []byte("n"), 0o644)
	if _, err := st.Commit("c", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "@p/new after commit", exists(filepath.Join(p, "new"), true))
}

// Same at a root showing p.
func TestReviewNegativeUnderRootAfterBigCommit(t *testing.T) {
	st := newStore(t, func(b string) { os.Mkdir(filepath.Join(b, "d"), 0o755) })
	for _, fk := range [][2]string{{store.Main, "p"}, {"p", "c"}} {
		if err := st.Fork(fk[0], fk[1]); err != nil {
			t.Fatal(err)
		}
	}
	_, mnt := mountStore(t, st, "p", hour)
	_, m2 := mountStore(t, st, "c", hour)
	os.Lstat(filepath.Join(mnt, "new"))
	os.Lstat(filepath.Join(mnt, "d", "new"))
	for i := 0; i < 300; i++ {
		os.WriteFile(filepath.Join(m2, fmt.Sprint("f", i)), nil, 0o644)
	}
	os.WriteFile(filepath.Join(m2, "new"), []byte("n"), 0o644)
	os.WriteFile(filepath.Join(m2, "d", "new"), []byte("n"), 0o644)
	if _, err := st.Commit("c", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "root new after commit", exists(filepath.Join(mnt, "new"), true))
	eventually(t, "root d/new after commit", exists(filepath.Join(mnt, "d", "new"), true))
}

// A commit into p where c deleted a file, made an opaque dir, and renamed a dir.
func TestReviewCommitWhiteoutOpaqueRename(t *testing.T) {
	st := newStore(t, func(b string) {
		os.WriteFile(filepath.Join(b, "gone"), []byte("g"), 0o644)
		os.Mkdir(filepath.Join(b, "o"), 0o755)
		os.WriteFile(filepath.Join(b, "o", "old"), []byte("o"), 0o644)
		os.Mkdir(filepath.Join(b, "r"), 0o755)
		os.WriteFile(filepath.Join(b, "r", "in"), []byte("r"), 0o644)
	})
	for _, fk := range [][2]string{{store.Main, "p"}, {"p", "c"}} {
		if err := st.Fork(fk[0], fk[1]); err != nil {
			t.Fatal(err)
		}
	}
	_, mnt := mountStore(t, st, "p", hour)
	_, m2 := mountStore(t, st, "c", hour)
	for _, q := range []string{"gone", "o/old", "r/in", "s", "s/in"} {
		os.Lstat(filepath.Join(mnt, q))
	}
	os.ReadDir(mnt)
	os.ReadDir(filepath.Join(mnt, "o"))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Remove(filepath.Join(m2, "gone")))
	must(os.RemoveAll(filepath.Join(m2, "o")))
	must(os.Mkdir(filepath.Join(m2, "o"), 0o755))
	must(os.Rename(filepath.Join(m2, "r"), filepath.Join(m2, "s")))
	if _, err := st.Commit("c", false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "gone", exists(filepath.Join(mnt, "gone"), false))
	eventually(t, "o/old", exists(filepath.Join(mnt, "o", "old"), false))
	eventually(t, "o lists no old", listed(filepath.Join(mnt, "o"), "old", false))
	eventually(t, "r", exists(filepath.Join(mnt, "r", "in"), false))
	eventually(t, "s/in", exists(filepath.Join(mnt, "s", "in"), true))
	eventually(t, "root lists s", listed(mnt, "s", true))
}
