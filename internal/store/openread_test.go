package store

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// readVia opens rel in b with OpenRead and returns its content and Res.
func readVia(t *testing.T, s *Store, b *Branch, rel string) (string, Res, error) {
	t.Helper()
	var st unix.Stat_t
	fd, res, err := s.OpenRead(b, rel, unix.O_RDONLY, &st)
	if err != nil {
		return "", res, err
	}
	defer unix.Close(fd)
	var own unix.Stat_t
	if err := unix.Fstat(fd, &own); err != nil || own.Ino != st.Ino || own.Size != st.Size {
		t.Fatalf("%s: st is not the descriptor's fstat: %+v vs %+v (%v)", rel, st, own, err)
	}
	buf := make([]byte, 64)
	n, _ := unix.Read(fd, buf)
	return string(buf[:n]), res, nil
}

// TestOpenRead: a read-only open finds what resolve finds, in the base
// (without its lstats), in layers and through hard links copied up.
func TestOpenRead(t *testing.T) {
	f := newFixture(t, map[string]string{"d/e/f": "base-f", "d/g": "base-g", "h": "base-h", "top/": ""})
	if err := os.Symlink("/etc", f.base+"/d/etc"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("e", f.base+"/d/ln"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", f.base+"/d/host"); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(f.base+"/h", f.base+"/top/h2"); err != nil {
		t.Fatal(err)
	}
	f.reopen()
	f.fork(Main, "x")
	x := f.br("x")
	f.write(x, "d/g", "x-g")
	f.write(x, "h", "x-h") // copies up one name of the hard-linked pair
	for _, tc := range []struct {
		b            *Branch
		rel, want    string
		lower, fails bool
	}{
		{f.br(Main), "d/e/f", "base-f", false, false},
		{x, "d/e/f", "base-f", true, false},
		{x, "d/g", "x-g", false, false},
		{f.br(Main), "d/g", "base-g", false, false},
		{x, "top/h2", "x-h", false, false}, // the other name shows the copy
		{f.br(Main), "top/h2", "base-h", false, false},
		{x, "d/etc/passwd", "", false, true}, // no symlink is followed out of the base
		{x, "d/ln/f", "", false, true},       // nor inside it
		{x, "d/host", "", false, true},       // nor at the end
		{x, "d/none", "", false, true},
		{x, "d/g/sub", "", false, true},
	} {
		got, res, err := readVia(t, f.s, tc.b, tc.rel)
		if tc.fails {
			if err == nil {
				t.Errorf("%s:%s opened (%q)", tc.b.Name, tc.rel, got)
			}
			continue
		}
		if err != nil || got != tc.want || res.Lower != tc.lower {
			t.Errorf("%s:%s = %q lower %v, %v; want %q lower %v", tc.b.Name, tc.rel, got, res.Lower, err, tc.want, tc.lower)
			continue
		}
		strict, err := f.s.Resolve(tc.b, tc.rel)
		if err != nil || strict.Real != res.Real || strict.Depth != res.Depth || strict.Lower != res.Lower || strict.Nlink != res.Nlink {
			t.Errorf("%s:%s: OpenRead %+v, Resolve %+v (%v)", tc.b.Name, tc.rel, res, strict, err)
		}
	}
}

// TestOpenReadAsOld: OpenRead answers as resolve and open(2) did, for the
// flags the kernel sends (FMODE_EXEC when a program runs, which openat2
// refuses if passed on) and the root. A base directory renamed away and
// made again (or replaced by a symlink) behind the store's back changes
// nothing: the store walks the directory it opened at Open.
func TestOpenReadAsOld(t *testing.T) {
	const fmodeExec, kernelLargefile = 0x20, 0o100000
	f := newFixture(t, map[string]string{"bin/tool": "tool", "top": "t", "sub/f": "old"})
	f.fork(Main, "x")
	x := f.br("x")
	f.write(x, "top", "x-top")
	old := func(b *Branch, rel string, flags int) (string, Res, error) {
		res, err := f.s.Resolve(b, rel)
		if err != nil {
			return "", res, err
		}
		fd, err := unix.Open(res.Real, flags|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", res, err
		}
		defer unix.Close(fd)
		buf := make([]byte, 64)
		n, _ := unix.Read(fd, buf)
		return string(buf[:max(n, 0)]), res, nil
	}
	check := func(b *Branch, rel string, flags int) {
		t.Helper()
		var st unix.Stat_t
		fd, res, err := f.s.OpenRead(b, rel, flags, &st)
		got := ""
		if err == nil {
			buf := make([]byte, 64)
			n, _ := unix.Read(fd, buf)
			got = string(buf[:max(n, 0)])
			unix.Close(fd)
		}
		want, wres, werr := old(b, rel, flags)
		if (err == nil) != (werr == nil) || got != want || res != wres {
			t.Errorf("%s:%q flags %#x: %q %+v %v; before: %q %+v %v", b.Name, rel, flags, got, res, err, want, wres, werr)
		}
	}
	for _, b := range []*Branch{f.br(Main), x} {
		for _, rel := range []string{"bin/tool", "top", ""} {
			for _, fl := range []int{unix.O_RDONLY, unix.O_RDONLY | kernelLargefile, unix.O_RDONLY | kernelLargefile | fmodeExec} {
				check(b, rel, fl)
			}
		}
	}
	if err := os.Rename(f.base, f.base+".old"); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(f.base+"/sub", 0o755)
	os.WriteFile(f.base+"/sub/f", []byte("new"), 0o644)
	for _, b := range []*Branch{f.br(Main), x} {
		if got, _, err := readVia(t, f.s, b, "sub/f"); err != nil || got != "old" {
			t.Errorf("%s: sub/f after the base was renamed away and made again: %q, %v; want the opened base's %q", b.Name, got, err, "old")
		}
	}
}
