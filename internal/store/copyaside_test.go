package store

import (
	"bytes"
	"os"
	"testing"
)

// TestCopyUpAside: a file big enough to be copied outside the lock copies
// up whole, with its metadata and inode number, its reservation released
// and its blocks counted once; a second copy-up finds it in the head.
func TestCopyUpAside(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 3<<20/16)
	f := newFixture(t, map[string]string{"big": string(data)})
	os.Chmod(f.base+"/big", 0o640)
	f.fork(Main, "c")
	c := f.br("c")
	usedBefore, _ := f.s.Used()
	real, err := f.s.CopyUp(c, "big")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(real); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("copied-up content: %d bytes, %v", len(got), err)
	}
	if m := f.mode(c, "big"); m != 0o640 {
		t.Errorf("mode %o, want 640", m)
	}
	res, _ := f.s.Resolve(c, "big")
	if res.Depth != len(c.chain) || res.Real != real || res.Ino == 0 {
		t.Errorf("after the copy-up: %+v", res)
	}
	f.s.mu.RLock()
	reserved := f.s.reserved
	f.s.mu.RUnlock()
	used, _ := f.s.Used()
	if reserved != 0 || used-usedBefore < int64(len(data)) || used-usedBefore > int64(len(data))+64<<10 {
		t.Errorf("reserved %d, used grew by %d for %d bytes", reserved, used-usedBefore, len(data))
	}
	if again, err := f.s.CopyUp(c, "big"); err != nil || again != real {
		t.Errorf("second copy-up: %s, %v", again, err)
	}
	ents, _ := os.ReadDir(f.s.tmpDir())
	if len(ents) != 0 {
		t.Errorf("%d copies left in %s", len(ents), f.s.tmpDir())
	}
}
