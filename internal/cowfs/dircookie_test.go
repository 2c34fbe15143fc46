package cowfs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/internal/nodefs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// TestRemoveToolsInBranch: rm -r, find -delete, os.RemoveAll and the files
// API's recursive remove (nodefs) read a
// directory while they remove from it (the parent's stream open while the
// children are read and removed); in a branch at depth 1 they empty a tree
// bigger than a READDIR reply, made in the branch or in a frozen layer
// below it (whiteouts), and report no error.
func TestRemoveToolsInBranch(t *testing.T) {
	e := newBranchEnv(t, 1, true, 0)
	pad := strings.Repeat("q", 180)
	makeTree := func(d string) {
		for i := range 200 {
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f-%04d-%s", i, pad)), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for i := range 4 {
			s := filepath.Join(d, fmt.Sprintf("d-%02d-%s", i, pad))
			if err := os.Mkdir(s, 0o755); err != nil {
				t.Fatal(err)
			}
			for j := range 40 {
				if err := os.WriteFile(filepath.Join(s, fmt.Sprintf("g-%04d-%s", j, pad)), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	tools := map[string]func(d string) error{
		"rm": func(d string) error {
			out, err := exec.Command("rm", "-r", d).CombinedOutput()
			if err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}
			return nil
		},
		"find": func(d string) error {
			out, err := exec.Command("find", d, "-delete").CombinedOutput()
			if err != nil {
				return fmt.Errorf("%w: %s", err, out)
			}
			return nil
		},
		"RemoveAll": os.RemoveAll,
		"nodefs": func(d string) error { // the files API's file_remove
			nf, err := nodefs.New(nodefs.Root{Prefix: "/", Dir: filepath.Dir(d)})
			if err != nil {
				return err
			}
			return nf.Remove(t.Context(), filepath.Base(d), true)
		},
	}
	for name, remove := range tools {
		for _, lower := range []bool{false, true} {
			var d string
			if lower {
				d = filepath.Join(e.Lower(t, func(dir string) {
					os.Mkdir(filepath.Join(dir, "top"), 0o755)
					makeTree(filepath.Join(dir, "top"))
				}), "top")
			} else {
				d = filepath.Join(e.Dir(t), "top")
				os.Mkdir(d, 0o755)
				makeTree(d)
			}
			if err := remove(d); err != nil {
				t.Errorf("%s (lower %v): %v", name, lower, err)
			}
			if _, err := os.Lstat(d); !os.IsNotExist(err) {
				t.Errorf("%s (lower %v): the tree is still there: %v", name, lower, err)
			}
		}
	}
}

// TestCookieStream: a listing continued from an entry's cookie lists the
// entries after it, also in a listing rebuilt without entries before it.
func TestCookieStream(t *testing.T) {
	var all []fuse.DirEntry
	for i := range 100 {
		all = append(all, fuse.DirEntry{Name: fmt.Sprintf("n%d", i)})
	}
	full := newCookieStream(append([]fuse.DirEntry(nil), all...))
	var order []string
	var offs []uint64
	for full.HasNext() {
		de, _ := full.Next()
		if len(offs) > 0 && de.Off <= offs[len(offs)-1] {
			t.Fatalf("cookies not ascending: %d after %d", de.Off, offs[len(offs)-1])
		}
		order, offs = append(order, de.Name), append(offs, de.Off)
	}
	// Rebuilt without the first 60 entries (removed by the reader).
	var rest []fuse.DirEntry
	for _, n := range order[60:] {
		rest = append(rest, fuse.DirEntry{Name: n})
	}
	s := newCookieStream(rest)
	s.Seekdir(t.Context(), offs[59])
	var got []string
	for s.HasNext() {
		de, _ := s.Next()
		got = append(got, de.Name)
	}
	if strings.Join(got, ",") != strings.Join(order[60:], ",") {
		t.Fatalf("continued from the 60th cookie: %d entries, want the 40 after it", len(got))
	}
}

// TestStreamAcrossStale: a directory stream of a branch that goes stale
// while it is read (a sibling commits first) lists every entry exactly once
// and ends without an error: the stale branch's files still list.
func TestStreamAcrossStale(t *testing.T) {
	e := newBranchEnv(t, 1, true, 0)
	top := filepath.Join(e.Dir(t), "top")
	if err := os.Mkdir(top, 0o755); err != nil {
		t.Fatal(err)
	}
	pad := strings.Repeat("s", 180)
	const n = 200
	for i := range n {
		if err := os.WriteFile(filepath.Join(top, fmt.Sprintf("f-%04d-%s", i, pad)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	leaf := filepath.Join(e.mnt, "@"+e.leaf)
	e.ctl(t, leaf, "create:x")
	e.ctl(t, leaf, "create:y")
	x := filepath.Join(leaf, "@x", filepath.Base(filepath.Dir(top)), "top")
	fd, err := unix.Open(x, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 2048)
	seen := map[string]int{}
	for call := 0; ; call++ {
		nb, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatalf("getdents %d of the branch (stale after the first): %v", call, err)
		}
		if nb == 0 {
			break
		}
		for b := buf[:nb]; len(b) > 0; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			name, _, _ := strings.Cut(string(b[19:reclen]), "\x00")
			seen[name]++
			b = b[reclen:]
		}
		if call == 0 {
			os.WriteFile(filepath.Join(leaf, "@y", "y-was-here"), nil, 0o644)
			e.ctl(t, filepath.Join(leaf, "@y"), "commit")
			if err := os.WriteFile(filepath.Join(x, "late"), nil, 0o644); !errors.Is(err, unix.ESTALE) {
				t.Fatalf("a write in x after y committed: %v, want ESTALE (x stale)", err)
			}
		}
	}
	if len(seen) != n+2 {
		t.Fatalf("the stale branch's stream: %d names, want %d", len(seen), n+2)
	}
	for name, c := range seen {
		if c != 1 {
			t.Fatalf("the stale branch's stream: %q listed %d times", name[:10], c)
		}
	}
}

// BenchmarkCookieStream: the cost of ordering a listing of 10,000 names by
// cookie (the hash and the sort), per listing.
func BenchmarkCookieStream(b *testing.B) {
	ents := make([]fuse.DirEntry, 10000)
	for i := range ents {
		ents[i].Name = fmt.Sprintf("file-%05d.go", i)
	}
	work := make([]fuse.DirEntry, len(ents))
	for b.Loop() {
		copy(work, ents)
		newCookieStream(work)
	}
}
