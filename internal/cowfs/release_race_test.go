package cowfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestOpenDuringLateRelease: close(2) returns before the kernel's RELEASE
// reaches us, and go-fuse drops a kernel inode's passthrough backing file
// only after our Release returns. An open of the same kernel inode in that
// window that finds a new real file (here a copy-up into a grandchild) must
// not be served by the old backing file, which is the parent's frozen layer:
// the grandchild's write would show in its parent. This is the interleaving
// behind a failure of TestTreeFilesConformance/ForkIsolation under load
// ("a.txt in n2 = four, want two"); the hook holds Release in the window.
func TestOpenDuringLateRelease(t *testing.T) {
	f, _, mnt := mount(t, func(b string) { os.WriteFile(filepath.Join(b, "a.txt"), []byte("base"), 0o644) })
	if !f.Passthrough() {
		t.Skip("passthrough is off (not root): no backing file to share")
	}
	st := f.Store()
	type gate struct{ reached, proceed chan struct{} }
	var armed atomic.Pointer[gate]
	hook := func(h *handle) {
		if h.write || !strings.HasSuffix(h.real, "/a.txt") {
			return
		}
		if g := armed.Swap(nil); g != nil {
			close(g.reached)
			<-g.proceed
		}
	}
	afterDrop.Store(&hook)
	t.Cleanup(func() { afterDrop.Store(nil) })
	// One round shows the fault about one time in three (whether the
	// kernel's open lands in the window also depends on where the fork
	// found the parent's writer): 20 rounds.
	for i := range 20 {
		p, c := fmt.Sprintf("p%d", i), fmt.Sprintf("c%d", i)
		if err := st.Fork("main", p); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(mnt, "@"+p, "a.txt"), []byte("two"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := st.Fork(p, c); err != nil {
			t.Fatal(err)
		}
		reached, proceed := make(chan struct{}), make(chan struct{})
		armed.Store(&gate{reached, proceed})
		if d, err := os.ReadFile(filepath.Join(mnt, "@"+c, "a.txt")); err != nil || string(d) != "two" {
			close(proceed)
			t.Fatalf("%s reads %q, %v; want two", c, d, err)
		}
		select {
		case <-reached:
		case <-time.After(10 * time.Second):
			close(proceed)
			t.Fatal("the reader's RELEASE did not come")
		}
		// The reader's release is in the window: write the grandchild.
		err := os.WriteFile(filepath.Join(mnt, "@"+c, "a.txt"), []byte("four"), 0o644)
		close(proceed)
		if err != nil {
			t.Fatalf("write %s: %v", c, err)
		}
		for _, w := range []struct{ view, want string }{{p, "two"}, {c, "four"}, {"main", "base"}} {
			if d, err := os.ReadFile(filepath.Join(mnt, "@"+w.view, "a.txt")); err != nil || string(d) != w.want {
				t.Errorf("round %d: a.txt in %s = %q, %v; want %q", i, w.view, d, err, w.want)
			}
		}
	}
}

// TestRotatedWriterAcrossFork: a log rotation through the mount (x open for
// writing, renamed to x.1, a new x opened for writing, the first closed),
// then a fork. The store must still count the new x's writer, so that the
// fork keeps its file apart: its writes after the fork must not show in
// the child. The release of the first descriptor uncounted the path it was
// opened at, which by then was the new x's.
func TestRotatedWriterAcrossFork(t *testing.T) {
	f, _, mnt := mount(t, nil)
	st := f.Store()
	if err := st.Fork("main", "p"); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mnt, "@p")
	a, err := os.OpenFile(filepath.Join(dir, "x"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "x"), filepath.Join(dir, "x.1")); err != nil {
		t.Fatal(err)
	}
	b, err := os.OpenFile(filepath.Join(dir, "x"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a.Close()
	p, _ := st.Branch("p")
	rotated, err := st.Resolve(p, "x.1")
	if err != nil {
		t.Fatal(err)
	}
	// close(2) returns before the RELEASE reaches the store.
	for deadline := time.Now().Add(2 * time.Second); st.Writing(rotated.Real) && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if err := st.Fork("p", "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.WriteString("after the fork"); err != nil {
		t.Fatal(err)
	}
	if d, err := os.ReadFile(filepath.Join(mnt, "@c", "x")); err != nil || len(d) != 0 {
		t.Errorf("x in the child = %q, %v; want it empty: the parent's writer wrote into the child's layer", d, err)
	}
	if d, err := os.ReadFile(filepath.Join(dir, "x")); err != nil || string(d) != "after the fork" {
		t.Errorf("x in the parent = %q, %v", d, err)
	}
}
