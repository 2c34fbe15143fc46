package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// statOf is rel's stat as b shows it (metadata and data merged).
func (f *fixture) statOf(b *Branch, rel string) unix.Stat_t {
	f.t.Helper()
	var st unix.Stat_t
	if _, err := f.s.ResolveStat(b, rel, &st); err != nil {
		f.t.Fatalf("stat %s:%s: %v", b.Name, rel, err)
	}
	return st
}

// readData reads rel in b through OpenRead, as a FUSE open for reading does.
func (f *fixture) readData(b *Branch, rel string) []byte {
	f.t.Helper()
	var st unix.Stat_t
	fd, _, err := f.s.OpenRead(b, rel, unix.O_RDONLY, &st)
	if err != nil {
		f.t.Fatalf("open %s:%s: %v", b.Name, rel, err)
	}
	defer unix.Close(fd)
	buf := make([]byte, st.Size+1)
	n, _ := unix.Pread(fd, buf, 0)
	return buf[:n]
}

func metaChange(t *testing.T, f *fixture, b *Branch, rel string, mode uint32) string {
	t.Helper()
	real, err := f.s.CopyUpMeta(b, rel)
	if err != nil {
		t.Fatalf("CopyUpMeta %s:%s: %v", b.Name, rel, err)
	}
	if err := f.s.Chmod(real, mode); err != nil {
		t.Fatal(err)
	}
	return real
}

// TestMetacopy: a metadata change of a lower file copies no data: the
// head holds an empty file with the metadata, reads take the data from
// below, Diff says metadata only, it survives a reopen and a fork; the
// first write copies the data under the new metadata; a commit into main
// of a metadata-only change changes the base file's metadata in place
// (same inode, same data, xattrs made equal).
func TestMetacopy(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<19) // 8 MiB
	f := newFixture(t, map[string]string{"big": string(big), "small": "small\n"})
	bigBase := filepath.Join(f.base, "big")
	unix.Setxattr(bigBase, "user.keep", []byte("k"), 0)
	unix.Setxattr(bigBase, "user.drop", []byte("d"), 0)
	var baseSt unix.Stat_t
	unix.Lstat(bigBase, &baseSt)
	f.fork(Main, "b", "sib") // sib goes stale at b's commit, and keeps its view
	b := f.br("b")
	real := metaChange(t, f, b, "big", 0o600)
	if err := f.s.Removexattr(real, "user.drop"); err != nil {
		t.Fatal(err)
	}
	if err := f.s.Setxattr(real, "user.new", []byte("n"), 0); err != nil {
		t.Fatal(err)
	}
	check := func(when string) {
		t.Helper()
		b = f.br("b")
		st := f.statOf(b, "big")
		if st.Mode&07777 != 0o600 || st.Size != int64(len(big)) || st.Blocks*512 < int64(len(big)) {
			t.Fatalf("%s: big in b: mode %#o size %d blocks %d", when, st.Mode&07777, st.Size, st.Blocks)
		}
		if held := f.s.Held()["b"]; held > 64<<10 {
			t.Fatalf("%s: b holds %d bytes after a chmod of an 8 MiB file: its data was copied", when, held)
		}
		if got := f.readData(b, "big"); !bytes.Equal(got, big) {
			t.Fatalf("%s: big's data in b: %d bytes, want the base's", when, len(got))
		}
		ch, err := f.s.Diff("b")
		if err != nil || len(ch) != 1 || ch[0] != (Change{Kind: Modified, Path: "big", Meta: true}) {
			t.Fatalf("%s: diff %+v, %v; want big modified, metadata only", when, ch, err)
		}
	}
	check("live")
	f.reopen()
	check("after a reopen")

	// A fork of b, and a metadata change over b's (data two layers down),
	// then a write: the data comes up under c's metadata.
	f.fork("b", "c")
	c := f.br("c")
	metaChange(t, f, c, "big", 0o640)
	if st := f.statOf(c, "big"); st.Mode&07777 != 0o640 || st.Size != int64(len(big)) {
		t.Fatalf("big in c: mode %#o size %d", st.Mode&07777, st.Size)
	}
	fd, res, err := f.s.OpenFile(c, "big", unix.O_WRONLY|unix.O_APPEND, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(fd, []byte("+"))
	unix.Close(fd)
	f.s.CloseWrite(res.Writer)
	if got := f.readData(c, "big"); !bytes.Equal(got, append(append([]byte{}, big...), '+')) {
		t.Fatalf("big in c after a write: %d bytes", len(got))
	}
	if st := f.statOf(c, "big"); st.Mode&07777 != 0o640 {
		t.Fatalf("big in c after a write: mode %#o", st.Mode&07777)
	}
	if ch, _ := f.s.Diff("c"); len(ch) != 1 || ch[0].Meta {
		t.Fatalf("diff of c after a write: %+v, want a change of data", ch)
	}
	if err := f.s.Abort("c"); err != nil {
		t.Fatal(err)
	}
	// A write in a fork of b, whose head has no copy of big: the data of
	// b's metadata-only copy comes up under b's metadata.
	f.fork("b", "d")
	d := f.br("d")
	fd, res, err = f.s.OpenFile(d, "big", unix.O_WRONLY|unix.O_APPEND, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(fd, []byte("+d"))
	unix.Close(fd)
	f.s.CloseWrite(res.Writer)
	if got := f.readData(d, "big"); !bytes.Equal(got, append(append([]byte{}, big...), "+d"...)) {
		t.Fatalf("big in d after a write: %d bytes", len(got))
	}
	if st := f.statOf(d, "big"); st.Mode&07777 != 0o600 {
		t.Fatalf("big in d after a write: mode %#o, want b's 0600", st.Mode&07777)
	}
	if err := f.s.Abort("d"); err != nil {
		t.Fatal(err)
	}

	// A write to a metadata-only copy in the head: the data is copied
	// into it, the metadata and the times kept.
	metaChange(t, f, f.br("b"), "small", 0o604)
	before := f.statOf(f.br("b"), "small")
	fd, res, err = f.s.OpenFile(f.br("b"), "small", unix.O_WRONLY|unix.O_APPEND, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	if st := f.statOf(f.br("b"), "small"); st.Mtim != before.Mtim || st.Size != before.Size {
		t.Fatalf("an open for writing changed small: mtime %v -> %v, size %d -> %d", before.Mtim, st.Mtim, before.Size, st.Size)
	}
	unix.Write(fd, []byte("more\n"))
	unix.Close(fd)
	f.s.CloseWrite(res.Writer)
	if got := string(f.readData(f.br("b"), "small")); got != "small\nmore\n" {
		t.Fatalf("small after a write: %q", got)
	}
	if st := f.statOf(f.br("b"), "small"); st.Mode&07777 != 0o604 {
		t.Fatalf("small after a write: mode %#o", st.Mode&07777)
	}

	// Commit into main: big's metadata lands on the base's own inode.
	f.commit("b", true)
	var st unix.Stat_t
	if err := unix.Lstat(bigBase, &st); err != nil {
		t.Fatal(err)
	}
	if st.Ino != baseSt.Ino || st.Mode&07777 != 0o600 || st.Size != int64(len(big)) {
		t.Fatalf("the base's big after the commit: ino %d (was %d) mode %#o size %d", st.Ino, baseSt.Ino, st.Mode&07777, st.Size)
	}
	if d, _ := os.ReadFile(bigBase); !bytes.Equal(d, big) {
		t.Fatal("the base's big data changed")
	}
	for name, want := range map[string]string{"user.keep": "k", "user.new": "n", "user.drop": "", "user.arbor.metacopy": "", "user.arbor.ino": ""} {
		buf := make([]byte, 64)
		n, err := unix.Getxattr(bigBase, name, buf)
		switch {
		case want == "" && !errors.Is(err, unix.ENODATA):
			t.Errorf("the base's big has %s (%v)", name, err)
		case want != "" && (err != nil || string(buf[:n]) != want):
			t.Errorf("the base's big %s = %q, %v; want %q", name, buf[:max(n, 0)], err, want)
		}
	}
	if got := f.baseRead("small"); got != "small\nmore\n" {
		t.Fatalf("the base's small: %q", got)
	}
	// The stale sibling still sees big and small as at its fork.
	sib := f.br("sib")
	if st := f.statOf(sib, "big"); st.Mode&07777 != 0o644 || st.Size != int64(len(big)) {
		t.Fatalf("the stale sibling's big: mode %#o size %d", st.Mode&07777, st.Size)
	}
	if got := f.readData(sib, "big"); !bytes.Equal(got, big) {
		t.Fatal("the stale sibling's big data")
	}
	if got := f.read(sib, "small"); got != "small\n" {
		t.Fatalf("the stale sibling's small: %q", got)
	}
}

// TestAttackMetacopySwap: a metadata-only copy reads its data from the
// lower file by name. After the chmod the base's owner swaps that file, and
// a directory above another, for symlinks to a victim outside the base:
// reads through the branch and the first write's copy-up never reach the
// victim's data, nor change it.
func TestAttackMetacopySwap(t *testing.T) {
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	if err := os.WriteFile(victim, []byte("victim's secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, map[string]string{"f": "mine\n", "d/g": "mine too\n"})
	f.fork(Main, "b")
	b := f.br("b")
	metaChange(t, f, b, "f", 0o644)
	metaChange(t, f, b, "d/g", 0o644)
	for _, p := range []string{"f", "d/g"} {
		os.Remove(filepath.Join(f.base, p))
	}
	os.Remove(filepath.Join(f.base, "d"))
	if err := os.Symlink(victim, filepath.Join(f.base, "f")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(f.base, "d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(victim, filepath.Join(outside, "g")); err != nil {
		t.Fatal(err)
	}
	victim = filepath.Join(outside, "g")
	b = f.br("b")
	for _, rel := range []string{"f", "d/g"} {
		var st unix.Stat_t
		if fd, _, err := f.s.OpenRead(b, rel, unix.O_RDONLY, &st); err == nil {
			buf := make([]byte, 64)
			n, _ := unix.Pread(fd, buf, 0)
			unix.Close(fd)
			if bytes.Contains(buf[:n], []byte("secret")) {
				t.Errorf("%s read through the branch: %q", rel, buf[:n])
			}
		}
		if err := writeErr(f.s, b, rel, "written\n"); err == nil {
			if got := f.read(b, rel); got != "written\n" {
				t.Errorf("%s after the write: %q", rel, got)
			}
		}
	}
	if got, _ := os.ReadFile(victim); string(got) != "victim's secret" {
		t.Errorf("the victim: %q", got)
	}
	for _, rel := range []string{"f", "d/g"} {
		if got := f.read(b, rel); bytes.Contains([]byte(got), []byte("secret")) {
			t.Errorf("%s in the branch: %q", rel, got)
		}
	}
}
