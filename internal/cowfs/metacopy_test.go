package cowfs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMetacopyThroughMount: chmod, chown, utimensat and setxattr of a
// lower file in a branch copy its metadata only (the branch holds no more
// than a few KiB after them), show at once with the file's own size and
// data, and the first write copies the data under the new metadata.
func TestMetacopyThroughMount(t *testing.T) {
	data := bytes.Repeat([]byte("data"), 4<<20) // 16 MiB
	f, base, mnt := mount(t, func(b string) { os.WriteFile(filepath.Join(b, "big"), data, 0o644) })
	if err := f.Create("b", "main", 0); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(mnt, "big")
	mtime := time.Unix(1_000_000, 0)
	steps := []struct {
		name string
		do   func() error
	}{
		{"chmod", func() error { return os.Chmod(p, 0o600) }},
		{"utimensat", func() error { return os.Chtimes(p, mtime, mtime) }},
		{"setxattr", func() error { return unix.Setxattr(p, "user.k", []byte("v"), 0) }},
	}
	if os.Geteuid() == 0 {
		steps = append(steps, struct {
			name string
			do   func() error
		}{"chown", func() error { return os.Lchown(p, 65534, 65534) }})
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if held := f.st.Held()["b"]; held > 64<<10 {
			t.Fatalf("after %s of a 16 MiB lower file the branch holds %d bytes: its data was copied", s.name, held)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&07777 != 0o600 || st.Size != int64(len(data)) || st.Mtim.Sec != mtime.Unix() {
		t.Fatalf("big in the branch: mode %#o size %d mtime %d", st.Mode&07777, st.Size, st.Mtim.Sec)
	}
	if d, err := os.ReadFile(p); err != nil || !bytes.Equal(d, data) {
		t.Fatalf("big's data in the branch: %d bytes, %v", len(d), err)
	}
	ch, err := f.st.Diff("b")
	if err != nil || len(ch) != 1 || !ch[0].Meta {
		t.Fatalf("diff: %+v, %v; want big, metadata only", ch, err)
	}
	w, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("+")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if d, _ := os.ReadFile(p); !bytes.Equal(d, append(append([]byte{}, data...), '+')) {
		t.Fatalf("big after a write: %d bytes", len(d))
	}
	if err := unix.Stat(p, &st); err != nil || st.Mode&07777 != 0o600 {
		t.Fatalf("big after a write: mode %#o, %v", st.Mode&07777, err)
	}
	if held := f.st.Held()["b"]; held < int64(len(data)) {
		t.Fatalf("after a write the branch holds %d bytes, want the data's", held)
	}
	if d, _ := os.ReadFile(filepath.Join(base, "big")); !bytes.Equal(d, data) {
		t.Fatal("the base changed")
	}
}

// TestMetacopyReaderThenWriter: a reader holds a metadata-only copy open
// (its descriptor reads the lower data) when a writer opens it: the
// writer's open copies the data up and succeeds (a new kernel inode, not
// ESTALE), and a new open sees the write.
func TestMetacopyReaderThenWriter(t *testing.T) {
	f, _, mnt := mount(t, func(b string) { os.WriteFile(filepath.Join(b, "f"), []byte("lower"), 0o644) })
	if err := f.Create("b", "main", 0); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(mnt, "f")
	if err := os.Chmod(p, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatalf("open for writing beside a reader of the metadata-only copy: %v", err)
	}
	if _, err := w.Write([]byte("+w")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if d, err := os.ReadFile(p); err != nil || string(d) != "lower+w" {
		t.Fatalf("after the write: %q, %v", d, err)
	}
}
