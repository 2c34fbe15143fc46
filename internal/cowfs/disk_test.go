package cowfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestDiskWriterNoOvershoot: a writer opened while the store has plenty
// of room under its limit is served by the daemon, not by passthrough (a
// passthrough writer opened so wrote 300 MB into a 100 MB budget): writing
// three times the limit through it fails with ENOSPC at the limit, and the
// store never holds more than its limit.
func TestDiskWriterNoOvershoot(t *testing.T) {
	st := newStore(t, nil)
	f, mnt := mountStore(t, st, "", 0)
	const limit = 100 << 20
	if err := st.SetLimit(limit); err != nil {
		t.Fatal(err)
	}
	if err := f.Create("b", "", 0); err != nil {
		t.Fatal(err)
	}
	w, err := os.Create(filepath.Join(mnt, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	_, served := f.Served()
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	written := 0
	var werr error
	for written < 3*limit {
		var n int
		n, werr = w.Write(chunk)
		written += n
		if werr != nil {
			break
		}
	}
	if !errors.Is(werr, unix.ENOSPC) {
		t.Fatalf("wrote %d bytes into a %d-byte limit: %v, want ENOSPC", written, limit, werr)
	}
	if _, now := f.Served(); now == served {
		t.Fatalf("no write reached the daemon: the writer is passthrough")
	}
	w.Close()
	time.Sleep(50 * time.Millisecond)
	if used, _ := st.Used(); used > limit || written > limit {
		t.Fatalf("wrote %d bytes, the store holds %d, past its limit of %d", written, used, limit)
	}
	t.Logf("wrote %d of %d bytes before ENOSPC", written, 3*limit)
}

// TestDiskLimitWrites: near the limit a writer is served by the daemon; a
// write that would pass the limit fails with ENOSPC and leaves the file as
// it was, even while a passthrough reader holds the same file open.
func TestDiskLimitWrites(t *testing.T) {
	st := newStore(t, func(b string) { os.WriteFile(filepath.Join(b, "f"), bytes.Repeat([]byte("a"), 8192), 0o644) })
	f, mnt := mountStore(t, st, "", 0)
	if err := f.Create("b", "", 0); err != nil {
		t.Fatal(err)
	}
	if err := st.SetLimit(64 << 10); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(mnt, "f")
	// b's copy of f, the file both descriptors open: an open for writing
	// copies it up (a chmod would copy its metadata only).
	if c, err := os.OpenFile(p, os.O_WRONLY, 0); err != nil {
		t.Fatal(err)
	} else {
		c.Close()
	}
	r, err := os.Open(p) // a reader first: passthrough as root
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("open for writing beside a reader, near the limit: %v", err)
	}
	defer w.Close()
	if _, err := w.WriteAt(bytes.Repeat([]byte("b"), 16<<10), 8192); err != nil {
		t.Fatalf("a write that fits: %v", err)
	}
	if _, err := w.WriteAt(bytes.Repeat([]byte("c"), 64<<10), 24<<10); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("a write past the limit: %v, want ENOSPC", err)
	}
	want := append(bytes.Repeat([]byte("a"), 8192), bytes.Repeat([]byte("b"), 16<<10)...)
	got := make([]byte, 128<<10)
	n, _ := r.ReadAt(got, 0)
	if !bytes.Equal(got[:n], want) {
		t.Fatalf("the reader sees %d bytes, want the %d written before ENOSPC", n, len(want))
	}
	if d, _ := os.ReadFile(p); !bytes.Equal(d, want) {
		t.Fatalf("the file holds %d bytes, want %d", len(d), len(want))
	}
	if used, limit := st.Used(); used > limit {
		t.Fatalf("used %d > limit %d", used, limit)
	}
	// Metadata that needs room fails too once it is gone; a truncation
	// that frees gives room back.
	if _, err := w.WriteAt(bytes.Repeat([]byte("d"), 48<<10), int64(len(want))); !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("a second write past the limit: %v", err)
	}
	if err := w.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteAt(bytes.Repeat([]byte("e"), 32<<10), 4096); err != nil {
		t.Fatalf("a write that fits after a truncation freed room: %v", err)
	}
}

// TestDiskXattrsCounted: xattrs take disk, and count under the store's
// limit: set on many files in a branch, they are counted (the figure
// tracks what the layer allocates) and refused with ENOSPC past the limit.
// Before, they were never counted, and a tree grew past its budget.
func TestDiskXattrsCounted(t *testing.T) {
	st := newStore(t, nil)
	f, mnt := mountStore(t, st, "", 0)
	const limit = 4 << 20
	if err := st.SetLimit(limit); err != nil {
		t.Fatal(err)
	}
	if err := f.Create("b", "", 0); err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("y"), 3500)
	refused := false
	for i := range 4000 {
		p := filepath.Join(mnt, "e"+string(rune('a'+i%26))+"-"+time.Duration(i).String())
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			if errors.Is(err, unix.ENOSPC) {
				refused = true
				break
			}
			t.Fatal(err)
		}
		if err := unix.Setxattr(p, "user.pad", val, 0); err != nil {
			if errors.Is(err, unix.ENOSPC) {
				refused = true
				break
			}
			if errors.Is(err, unix.EOPNOTSUPP) {
				t.Skip("the layers' filesystem takes no user xattrs")
			}
			t.Fatal(err)
		}
	}
	if !refused {
		t.Fatalf("4000 files with a 3500-byte xattr each fit under a %d-byte limit", limit)
	}
	if used, _ := st.Used(); used > limit {
		t.Fatalf("the store counts %d bytes, past its limit %d", used, limit)
	}
}
