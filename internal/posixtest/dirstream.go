package posixtest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// A directory stream changed while it is read. POSIX: an entry removed or
// added after the opendir may or may not be returned; every other entry is
// returned exactly once, and the stream never fails for it. rm -r, find
// -delete, Go's os.RemoveAll and git walk depth first this way: the parent's
// stream stays open, read a few entries per getdents, while its children are
// opened, read and removed.

// streamTree is a directory's contents: name -> subdirectory, nil for a file.
type streamTree map[string]streamTree

// streamPad makes names long (about 200 bytes), so a few entries fill a
// getdents buffer and a FUSE READDIR reply.
var streamPad = strings.Repeat("p", 180)

// newStreamTree is the tree the stream cases walk: more entries than one
// READDIR reply holds, at every level.
func newStreamTree() streamTree {
	top := streamTree{}
	for i := range 240 {
		top[fmt.Sprintf("f-%04d-%s", i, streamPad)] = nil
	}
	for i := range 6 {
		sub := streamTree{}
		for j := range 50 {
			sub[fmt.Sprintf("g-%04d-%s", j, streamPad)] = nil
		}
		deeper := streamTree{}
		for j := range 30 {
			deeper[fmt.Sprintf("h-%04d-%s", j, streamPad)] = nil
		}
		sub[fmt.Sprintf("e-%s", streamPad)] = deeper
		top[fmt.Sprintf("d-%02d-%s", i, streamPad)] = sub
	}
	return top
}

// make creates tr under dir.
func (tr streamTree) make(t *testing.T, dir string) {
	t.Helper()
	for name, sub := range tr {
		p := join(dir, name)
		if sub == nil {
			writeFile(t, p, "x", 0o644)
			continue
		}
		mkdir(t, p, 0o755)
		sub.make(t, p)
	}
}

// streamBuf is the getdents buffer of the walks: a handful of long entries.
const streamBuf = 2048

// removeWalk empties dir as rm -r does: dir's stream stays open, read
// streamBuf bytes at a time, and each entry a call returns is removed
// (subdirectories walked the same way first) before the next call. After the
// first call it also removes the names in ahead, which it may not have seen:
// they may show later or not. Every other entry of want must show exactly
// once, no entry twice, none that is not in want.
func removeWalk(t *testing.T, dir string, want streamTree, ahead []string) {
	t.Helper()
	fd := open(t, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	defer closeIfOpen(&fd)
	buf := make([]byte, streamBuf)
	seen := map[string]bool{}
	gone := map[string]bool{} // removed before it showed
	for call := 0; ; call++ {
		ents := getdents(t, fd, buf, dir)
		if len(ents) == 0 {
			break
		}
		for _, e := range ents {
			if e.name == "." || e.name == ".." {
				continue
			}
			sub, known := want[e.name]
			switch {
			case !known:
				t.Fatalf("getdents %s after removals: unexpected entry %q", dir, trunc(e.name))
			case seen[e.name]:
				t.Fatalf("getdents %s after removals: %q listed twice", dir, trunc(e.name))
			}
			seen[e.name] = true
			if gone[e.name] {
				continue // removed ahead; showing it is allowed
			}
			p := join(dir, e.name)
			if sub != nil {
				if e.typ != unix.DT_DIR {
					t.Fatalf("getdents %s: %q has d_type %d, want a directory", dir, trunc(e.name), e.typ)
				}
				removeWalk(t, p, sub, nil)
				ok(t, unix.Rmdir(p), "rmdir %s after emptying it", trunc(p))
			} else {
				ok(t, unix.Unlink(p), "unlink %s", trunc(p))
			}
		}
		if call == 0 {
			for _, name := range ahead {
				if seen[name] {
					continue
				}
				ok(t, unix.Unlink(join(dir, name)), "unlink %s ahead of the stream", trunc(name))
				gone[name] = true
			}
		}
	}
	for name := range want {
		if !seen[name] && !gone[name] {
			t.Errorf("getdents %s after removals: %q never listed", dir, trunc(name))
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	wantNames(t, dir)
}

// aheadNames are files of newStreamTree's top that removeWalk removes
// before reading on: spread over the listing, whatever its order.
func aheadNames() []string {
	var out []string
	for i := 7; i < 240; i += 11 {
		out = append(out, fmt.Sprintf("f-%04d-%s", i, streamPad))
	}
	return out
}

func (s *suite) dirStreamCases() []Case {
	return []Case{
		{Name: "dir_stream_remove", Run: func(t *testing.T, dir string) {
			tr := newStreamTree()
			d := join(dir, "top")
			mkdir(t, d, 0o755)
			tr.make(t, d)
			removeWalk(t, d, tr, aheadNames())
			ok(t, unix.Rmdir(d), "rmdir of the emptied directory")
		}},
		{Name: "dir_stream_remove_lower",
			Lower: func(t *testing.T, dir string) {
				mkdir(t, join(dir, "top"), 0o755)
				newStreamTree().make(t, join(dir, "top"))
			},
			Run: func(t *testing.T, dir string) {
				d := join(dir, "top")
				tr := newStreamTree()
				// Some of it changed in this layer too: a merged listing.
				for i := range 20 {
					name := fmt.Sprintf("u-%04d-%s", i, streamPad)
					writeFile(t, join(d, name), "upper", 0o644)
					tr[name] = nil
				}
				for name, sub := range tr {
					if sub != nil {
						writeFile(t, join(d, name, "upper-file"), "upper", 0o644)
						sub["upper-file"] = nil
						break
					}
				}
				removeWalk(t, d, tr, aheadNames())
				ok(t, unix.Rmdir(d), "rmdir of the emptied lower directory")
				wantNames(t, dir)
			}},
		{Name: "dir_stream_two", Run: func(t *testing.T, dir string) {
			// Two streams of one directory, one opened while the other
			// is half read and entries are removed: each lists every
			// entry not removed exactly once.
			tr := newStreamTree()
			for name, sub := range tr {
				if sub != nil {
					delete(tr, name)
				}
			}
			tr.make(t, dir)
			a := open(t, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			defer closeIfOpen(&a)
			buf := make([]byte, streamBuf)
			seen := map[string]bool{}
			removed := map[string]bool{}
			// More than half: the first stream's position is past the
			// number of entries left.
			for len(removed) <= len(tr)/2+10 {
				for _, e := range getdents(t, a, buf, dir) {
					seen[e.name] = true
					if _, known := tr[e.name]; known {
						ok(t, unix.Unlink(join(dir, e.name)), "unlink %s", trunc(e.name))
						removed[e.name] = true
					}
				}
			}
			var rest []string
			for name := range tr {
				if !removed[name] {
					rest = append(rest, name)
				}
			}
			slices.Sort(rest)
			wantNames(t, dir, rest...) // the second stream, opened now
			for ents := getdents(t, a, buf, dir); len(ents) > 0; ents = getdents(t, a, buf, dir) {
				for _, e := range ents {
					if seen[e.name] {
						t.Fatalf("getdents %s: %q listed twice by the first stream", dir, trunc(e.name))
					}
					seen[e.name] = true
				}
			}
			for _, name := range rest {
				if !seen[name] {
					t.Errorf("getdents %s: %q never listed by the first stream", dir, trunc(name))
				}
			}
		}},
		{Name: "dir_stream_copyup_lower",
			Lower: func(t *testing.T, dir string) {
				mkdir(t, join(dir, "top"), 0o755)
				tr := newStreamTree()
				for name, sub := range tr {
					if sub != nil {
						delete(tr, name)
					}
				}
				tr.make(t, join(dir, "top"))
			},
			Run: func(t *testing.T, dir string) {
				// Lower files changed while the stream is read (a chmod:
				// a metadata copy-up; a write: a data copy-up) are each
				// listed exactly once, as is every other entry.
				d := join(dir, "top")
				fd := open(t, d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
				defer closeIfOpen(&fd)
				buf := make([]byte, streamBuf)
				seen := map[string]bool{}
				for call := 0; ; call++ {
					ents := getdents(t, fd, buf, d)
					if len(ents) == 0 {
						break
					}
					for _, e := range ents {
						if seen[e.name] {
							t.Fatalf("getdents %s during copy-ups: %q listed twice", d, trunc(e.name))
						}
						seen[e.name] = true
						if e.name == "." || e.name == ".." {
							continue
						}
						p := join(d, e.name)
						if call%2 == 0 {
							ok(t, unix.Chmod(p, 0o600), "chmod %s", trunc(p))
						} else {
							writeFile(t, p, "upper", 0o644)
						}
					}
					// And some not read yet.
					ahead := join(d, fmt.Sprintf("f-%04d-%s", (call*37)%240, streamPad))
					ok(t, unix.Chmod(ahead, 0o640), "chmod %s", trunc(ahead))
				}
				if len(seen) != 240+2 {
					t.Fatalf("getdents %s during copy-ups: %d entries, want %d", d, len(seen), 240+2)
				}
			}},
		{Name: "dir_stream_add", Run: func(t *testing.T, dir string) {
			// Entries added while the stream is read may show or not;
			// the others show exactly once.
			tr := newStreamTree()
			for name, sub := range tr {
				if sub != nil {
					delete(tr, name)
				}
			}
			tr.make(t, dir)
			fd := open(t, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			defer closeIfOpen(&fd)
			buf := make([]byte, streamBuf)
			seen := map[string]bool{}
			added := map[string]bool{}
			for call := 0; ; call++ {
				ents := getdents(t, fd, buf, dir)
				if len(ents) == 0 {
					break
				}
				for _, e := range ents {
					if seen[e.name] {
						t.Fatalf("getdents %s while adding: %q listed twice", dir, trunc(e.name))
					}
					seen[e.name] = true
					if _, known := tr[e.name]; !known && !added[e.name] && e.name != "." && e.name != ".." {
						t.Fatalf("getdents %s while adding: unexpected entry %q", dir, trunc(e.name))
					}
				}
				name := fmt.Sprintf("new-%04d-%s", call, streamPad)
				writeFile(t, join(dir, name), "", 0o644)
				added[name] = true
			}
			for name := range tr {
				if !seen[name] {
					t.Errorf("getdents %s while adding: %q never listed", dir, trunc(name))
				}
			}
		}},
		{Name: "dir_stream_seek", Run: func(t *testing.T, dir string) {
			// telldir/seekdir: the d_off of an entry, given back to
			// lseek, continues after that entry, as often as asked.
			tr := newStreamTree()
			for name, sub := range tr {
				if sub != nil {
					delete(tr, name)
				}
			}
			tr.make(t, dir)
			fd := open(t, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			defer closeIfOpen(&fd)
			buf := make([]byte, streamBuf)
			first := getdents(t, fd, buf, dir)
			if len(first) < 2 {
				t.Fatalf("getdents %s: %d entries in the first call", dir, len(first))
			}
			mark, err := unix.Seek(fd, 0, unix.SEEK_CUR)
			ok(t, err, "telldir")
			var rest []string
			for ents := getdents(t, fd, buf, dir); len(ents) > 0; ents = getdents(t, fd, buf, dir) {
				for _, e := range ents {
					rest = append(rest, e.name)
				}
			}
			if len(first)+len(rest) != len(tr)+2 {
				t.Fatalf("getdents %s: %d entries, want %d", dir, len(first)+len(rest), len(tr)+2)
			}
			_, err = unix.Seek(fd, mark, unix.SEEK_SET)
			ok(t, err, "seekdir")
			var again []string
			for ents := getdents(t, fd, buf, dir); len(ents) > 0; ents = getdents(t, fd, buf, dir) {
				for _, e := range ents {
					again = append(again, e.name)
				}
			}
			if strings.Join(again, "/") != strings.Join(rest, "/") {
				t.Fatalf("getdents %s after seekdir: %d entries, want the %d that followed", dir, len(again), len(rest))
			}
		}},
	}
}
