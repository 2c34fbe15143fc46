package cowfs

import (
	"os"
	"path/filepath"
	"testing"
)

// main holds a reader on a base file when, after a fork, it opens the file
// for writing: the write must reach the base, not the fork's snapshot (the
// reader's kernel inode is backed by the inode that moved there).
func TestRegressionMainReaderThenWriterAfterFork(t *testing.T) {
	f, base, mnt := mount(t, func(b string) { os.WriteFile(filepath.Join(b, "f"), []byte("old"), 0o644) })
	if err := f.Store().Fork("main", "c"); err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(filepath.Join(mnt, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatalf("main: open for write while main holds a reader, after a fork: %v", err)
	}
	w.WriteString("new")
	w.Close()
	buf := make([]byte, 10)
	n, _ := r.ReadAt(buf, 0)
	d, _ := os.ReadFile(filepath.Join(mnt, "f"))
	c, _ := os.ReadFile(filepath.Join(mnt, "@c", "f"))
	bd, _ := os.ReadFile(filepath.Join(base, "f"))
	t.Logf("main reader fd: %q, main via mount: %q, @c: %q, base on disk: %q", buf[:n], d, c, bd)
	if string(c) != "old" || string(bd) != "new" {
		t.Errorf("main's write landed in the fork's snapshot")
	}
}
