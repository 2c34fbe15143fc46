package cowfs

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/arbor-dev/arbor/internal/posixtest"
	"github.com/arbor-dev/arbor/internal/store"
)

func TestMain(m *testing.M) { posixtest.Main(m) }

// branchEnv runs the POSIX suite in a branch of a mounted store.
type branchEnv struct {
	t    *testing.T
	f    *FS
	mnt  string
	leaf string // the branch the cases run in
	seq  atomic.Int64
}

func (e *branchEnv) Strict() bool { return false }

// view is where branch b's files show.
func (e *branchEnv) view(b string) string {
	if b == e.f.Current() {
		return e.mnt
	}
	return filepath.Join(e.mnt, "@"+b)
}

func (e *branchEnv) Dir(t *testing.T) string {
	d := filepath.Join(e.view(e.leaf), fmt.Sprintf("case-%d", e.seq.Add(1)))
	if err := os.Mkdir(d, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o777)
	return d
}

// Lower runs setup in a branch, then forks it: the cases see setup's files
// in a frozen layer below their branch's head.
func (e *branchEnv) Lower(t *testing.T, setup func(dir string)) string {
	n := e.seq.Add(1)
	low, top := fmt.Sprintf("low-%d", n), fmt.Sprintf("top-%d", n)
	st := e.f.Store()
	if err := st.Fork(e.leaf, low); err != nil {
		t.Fatal(err)
	}
	d := filepath.Join(e.mnt, "@"+low, fmt.Sprintf("case-%d", n))
	if err := os.Mkdir(d, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(d, 0o777)
	setup(d)
	if err := st.Fork(low, top); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(e.mnt, "@"+low, "@"+top, fmt.Sprintf("case-%d", n))
}

// newBranchEnv mounts a fresh store and makes a chain of depth branches,
// each holding a change, for the cases to run in (depth 0: main).
func newBranchEnv(t *testing.T, depth int, passthrough bool) *branchEnv {
	need(t)
	root := t.TempDir()
	os.Chmod(filepath.Dir(root), 0o755)
	base, mnt := filepath.Join(root, "base"), filepath.Join(root, "mnt")
	os.Mkdir(base, 0o755)
	os.Mkdir(mnt, 0o755)
	st, err := store.Open(store.Config{Dir: filepath.Join(root, "state"), Base: base})
	if err != nil {
		t.Fatal(err)
	}
	leaf := store.Main
	for i := 1; i <= depth; i++ {
		name := fmt.Sprintf("d%d", i)
		if err := st.Fork(leaf, name); err != nil {
			t.Fatal(err)
		}
		b, _ := st.Branch(name)
		if err := st.Create(b, fmt.Sprintf("level-%d", i), false, func(real string) error {
			return os.WriteFile(real, []byte("x"), 0o644)
		}); err != nil {
			t.Fatal(err)
		}
		leaf = name
	}
	f, err := Mount(Config{Store: st, Mountpoint: mnt, Branch: leaf, Passthrough: &passthrough})
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := f.Unmount(true); err != nil {
			t.Error(err)
		}
		st.Close()
	})
	return &branchEnv{t: t, f: f, mnt: mnt, leaf: leaf}
}

func TestPOSIX(t *testing.T) {
	for _, c := range []struct {
		name        string
		depth       int
		passthrough bool
	}{
		{"main", 0, true},
		{"depth1", 1, true},
		{"depth32", 32, true},
		{"depth1-nopassthrough", 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			posixtest.Run(t, newBranchEnv(t, c.depth, c.passthrough))
		})
	}
}

// KnownLimit names the cases cowfs departs from, as its doc.go says.
func (e *branchEnv) KnownLimit(name string) string {
	switch name {
	case "file_lower_reader_sees_copyup", "mmap_shared_lower_live":
		return "a descriptor opened before a copy-up keeps reading the lower copy (overlayfs does the same)"
	case "link_across_copyup":
		return "the link count of a hard link copied up from a lower layer is approximate (names and data stay one inode)"
	}
	return ""
}
