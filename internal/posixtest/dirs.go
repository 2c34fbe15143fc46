package posixtest

import (
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// dirent is one raw directory entry, as getdents64 returns it.
type dirent struct {
	ino  uint64
	typ  uint8
	name string
}

// readDirents reads dir with getdents64 through a small buffer (so a long
// directory takes several calls), "." and ".." included.
func readDirents(t *testing.T, dir string) []dirent {
	t.Helper()
	fd := open(t, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	defer closeIfOpen(&fd)
	var out []dirent
	buf := make([]byte, 1024)
	for range 100000 {
		got := getdents(t, fd, buf, dir)
		if len(got) == 0 {
			return out
		}
		out = append(out, got...)
	}
	t.Fatalf("getdents %s does not end", dir)
	return nil
}

// getdents makes one getdents64 call on fd (the directory dir) into buf and
// returns the entries it gave: none at the end of the directory.
func getdents(t *testing.T, fd int, buf []byte, dir string) []dirent {
	t.Helper()
	n, err := unix.Getdents(fd, buf)
	ok(t, err, "getdents %s", dir)
	var out []dirent
	for b := buf[:n]; len(b) > 0; {
		// struct linux_dirent64 { u64 ino; s64 off; u16 reclen; u8 type; char name[]; }
		reclen := int(binary.NativeEndian.Uint16(b[16:18]))
		if reclen < 19 || reclen > len(b) {
			t.Fatalf("getdents %s: bad record length %d", dir, reclen)
		}
		name := b[19:reclen]
		if i := slices.Index(name, 0); i >= 0 {
			name = name[:i]
		}
		out = append(out, dirent{ino: binary.NativeEndian.Uint64(b[0:8]), typ: b[18], name: string(name)})
		b = b[reclen:]
	}
	return out
}

var dtypeOf = map[uint32]uint8{
	unix.S_IFREG: unix.DT_REG, unix.S_IFDIR: unix.DT_DIR, unix.S_IFLNK: unix.DT_LNK,
	unix.S_IFIFO: unix.DT_FIFO, unix.S_IFCHR: unix.DT_CHR, unix.S_IFBLK: unix.DT_BLK, unix.S_IFSOCK: unix.DT_SOCK,
}

// dirCases: mkdir, rmdir, unlink of a directory, readdir, lookup, st_nlink.
func (s *suite) dirCases() []Case {
	return []Case{
		{Name: "dir_mkdir_eexist", Run: func(t *testing.T, dir string) {
			d := join(dir, "d")
			ok(t, unix.Mkdir(d, 0o755), "mkdir")
			wantType(t, d, lstat(t, d), unix.S_IFDIR)
			wantErrno(t, unix.Mkdir(d, 0o755), "mkdir of an existing directory", unix.EEXIST)
			writeFile(t, join(dir, "f"), "", 0o644)
			wantErrno(t, unix.Mkdir(join(dir, "f"), 0o755), "mkdir over a file", unix.EEXIST)
			symlink(t, "nowhere", join(dir, "l"))
			wantErrno(t, unix.Mkdir(join(dir, "l"), 0o755), "mkdir over a dangling symlink", unix.EEXIST)
			wantErrno(t, unix.Mkdir(join(dir, "missing", "d"), 0o755), "mkdir under a missing directory", unix.ENOENT)
		}},
		{Name: "dir_rmdir", Run: func(t *testing.T, dir string) {
			d := join(dir, "d")
			ok(t, unix.Mkdir(d, 0o755), "mkdir")
			writeFile(t, join(d, "f"), "", 0o644)
			wantErrno(t, unix.Rmdir(d), "rmdir of a non-empty directory", unix.ENOTEMPTY)
			writeFile(t, join(dir, "file"), "", 0o644)
			wantErrno(t, unix.Rmdir(join(dir, "file")), "rmdir of a file", unix.ENOTDIR)
			wantErrno(t, unix.Rmdir(join(dir, "missing")), "rmdir of a missing name", unix.ENOENT)
			wantErrno(t, unix.Rmdir(d+"/."), "rmdir of .", unix.EINVAL)
			ok(t, unix.Unlink(join(d, "f")), "unlink")
			ok(t, unix.Rmdir(d), "rmdir of the emptied directory")
			wantErrno(t, unix.Lstat(d, new(unix.Stat_t)), "lstat after rmdir", unix.ENOENT)
			wantNames(t, dir, "file")
		}},
		{Name: "dir_unlink_dir", Run: func(t *testing.T, dir string) {
			d := join(dir, "d")
			ok(t, unix.Mkdir(d, 0o755), "mkdir")
			wantErrno(t, unix.Unlink(d), "unlink of a directory", unix.EISDIR)
			wantType(t, d, lstat(t, d), unix.S_IFDIR)
		}},
		{Name: "dir_readdir", Run: func(t *testing.T, dir string) {
			writeFile(t, join(dir, "file"), "x", 0o644)
			ok(t, unix.Mkdir(join(dir, "sub"), 0o755), "mkdir")
			symlink(t, "file", join(dir, "link"))
			ok(t, unix.Mkfifo(join(dir, "fifo"), 0o644), "mkfifo")
			want := map[string]uint8{".": unix.DT_DIR, "..": unix.DT_DIR, "file": unix.DT_REG,
				"sub": unix.DT_DIR, "link": unix.DT_LNK, "fifo": unix.DT_FIFO}
			got := map[string]uint8{}
			for _, e := range readDirents(t, dir) {
				if _, dup := got[e.name]; dup {
					t.Fatalf("readdir: %q listed twice", e.name)
				}
				got[e.name] = e.typ
			}
			for name, typ := range want {
				g, found := got[name]
				switch {
				case !found:
					t.Errorf("readdir: %q missing", name)
				case g != typ:
					t.Errorf("readdir: %q has d_type %d, want %d", name, g, typ)
				}
			}
			for name := range got {
				if _, found := want[name]; !found {
					t.Errorf("readdir: unexpected entry %q", name)
				}
			}
			wantNames(t, join(dir, "sub"))
		}},
		{Name: "dir_readdir_ino", Run: func(t *testing.T, dir string) {
			writeFile(t, join(dir, "file"), "x", 0o644)
			ok(t, unix.Mkdir(join(dir, "sub"), 0o755), "mkdir")
			symlink(t, "file", join(dir, "link"))
			for _, e := range readDirents(t, dir) {
				if e.name == "." || e.name == ".." {
					continue
				}
				if st := lstat(t, join(dir, e.name)); st.Ino != e.ino {
					t.Errorf("%s: d_ino %d, st_ino %d", e.name, e.ino, st.Ino)
				}
			}
		}},
		{Name: "dir_readdir_many", Run: func(t *testing.T, dir string) {
			// Enough long names that getdents needs many calls.
			const n = 300
			var want []string
			for i := range n {
				name := fmt.Sprintf("entry-%04d-%s", i, "padding-to-make-the-record-long")
				writeFile(t, join(dir, name), "", 0o644)
				want = append(want, name)
			}
			slices.Sort(want)
			wantNames(t, dir, want...)
			seen := map[string]bool{}
			for _, e := range readDirents(t, dir) {
				if seen[e.name] {
					t.Fatalf("readdir: %q listed twice", e.name)
				}
				seen[e.name] = true
			}
			if len(seen) != n+2 {
				t.Fatalf("raw readdir: %d entries, want %d", len(seen), n+2)
			}
		}},
		{Name: "dir_lookup_missing", Run: func(t *testing.T, dir string) {
			p := join(dir, "missing")
			wantErrno(t, unix.Lstat(p, new(unix.Stat_t)), "lstat of a missing name", unix.ENOENT)
			_, err := unix.Open(p, unix.O_RDONLY, 0)
			wantErrno(t, err, "open of a missing name", unix.ENOENT)
			wantErrno(t, unix.Unlink(p), "unlink of a missing name", unix.ENOENT)
			wantErrno(t, unix.Rename(p, join(dir, "x")), "rename of a missing name", unix.ENOENT)
			wantErrno(t, unix.Lstat(join(dir, "missing", "deeper"), new(unix.Stat_t)), "lstat under a missing dir", unix.ENOENT)
			// Twice: a negative entry cached by the first lookup must not turn
			// into a positive one, nor the reverse after a create.
			wantErrno(t, unix.Lstat(p, new(unix.Stat_t)), "second lstat of a missing name", unix.ENOENT)
			writeFile(t, p, "now", 0o644)
			wantContent(t, p, "now")
		}},
		{Name: "dir_lookup_lower_deleted",
			Lower: func(t *testing.T, dir string) {
				writeFile(t, join(dir, "f"), "lower", 0o644)
				mkdir(t, join(dir, "d"), 0o755)
				writeFile(t, join(dir, "d", "g"), "lower", 0o644)
			},
			Run: func(t *testing.T, dir string) {
				wantContent(t, join(dir, "f"), "lower")
				ok(t, unix.Unlink(join(dir, "f")), "unlink lower file")
				wantErrno(t, unix.Lstat(join(dir, "f"), new(unix.Stat_t)), "lstat of a deleted lower file", unix.ENOENT)
				_, err := unix.Open(join(dir, "f"), unix.O_RDONLY, 0)
				wantErrno(t, err, "open of a deleted lower file", unix.ENOENT)
				wantErrno(t, unix.Unlink(join(dir, "f")), "second unlink of a deleted lower file", unix.ENOENT)
				ok(t, unix.Unlink(join(dir, "d", "g")), "unlink lower file in lower dir")
				ok(t, unix.Rmdir(join(dir, "d")), "rmdir of an emptied lower dir")
				wantErrno(t, unix.Lstat(join(dir, "d", "g"), new(unix.Stat_t)), "lstat under a deleted lower dir", unix.ENOENT)
				wantNames(t, dir)
			}},
		{Name: "dir_path_through_file", Run: func(t *testing.T, dir string) {
			f := join(dir, "f")
			writeFile(t, f, "x", 0o644)
			wantErrno(t, unix.Lstat(join(f, "x"), new(unix.Stat_t)), "lstat through a file", unix.ENOTDIR)
			_, err := unix.Open(join(f, "x"), unix.O_CREAT|unix.O_WRONLY, 0o644)
			wantErrno(t, err, "create through a file", unix.ENOTDIR)
			wantErrno(t, unix.Mkdir(join(f, "x"), 0o755), "mkdir through a file", unix.ENOTDIR)
			wantErrno(t, unix.Lstat(f+"/", new(unix.Stat_t)), "lstat of a file with a trailing slash", unix.ENOTDIR)
			_, err = unix.Open(f, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			wantErrno(t, err, "O_DIRECTORY on a file", unix.ENOTDIR)
			ok(t, unix.Mkdir(join(dir, "d"), 0o755), "mkdir")
			_, err = unix.Open(join(dir, "d"), unix.O_WRONLY, 0)
			wantErrno(t, err, "open of a directory for writing", unix.EISDIR)
			_, err = unix.Open(join(dir, "d"), unix.O_RDWR, 0)
			wantErrno(t, err, "open of a directory for reading and writing", unix.EISDIR)
		}},
		{Name: "dir_nlink", Run: func(t *testing.T, dir string) {
			d := join(dir, "d")
			ok(t, unix.Mkdir(d, 0o755), "mkdir")
			s.countsSubdirs(t, d)
			wantNlink(t, d, 2)
			ok(t, unix.Mkdir(join(d, "a"), 0o755), "mkdir")
			ok(t, unix.Mkdir(join(d, "b"), 0o755), "mkdir")
			writeFile(t, join(d, "file"), "", 0o644) // files do not count
			wantNlink(t, d, 4)
			wantNlink(t, join(d, "a"), 2)
			ok(t, unix.Rename(join(d, "b"), join(dir, "b")), "rename a subdir out")
			wantNlink(t, d, 3)
			ok(t, unix.Rmdir(join(d, "a")), "rmdir")
			wantNlink(t, d, 2)
		}},
		{Name: "dir_lower_nlink",
			Lower: func(t *testing.T, dir string) {
				for _, p := range []string{"d", "d/a", "d/b"} {
					mkdir(t, join(dir, p), 0o755)
				}
			},
			Run: func(t *testing.T, dir string) {
				d := join(dir, "d")
				s.countsSubdirs(t, d)
				wantNlink(t, d, 4)
				ok(t, unix.Mkdir(join(d, "c"), 0o755), "mkdir in a lower dir")
				wantNlink(t, d, 5)
				ok(t, unix.Rmdir(join(d, "a")), "rmdir of a lower subdir")
				wantNlink(t, d, 4)
			}},
		{Name: "dir_lower_readdir",
			Lower: func(t *testing.T, dir string) {
				mkdir(t, join(dir, "d"), 0o755)
				for i := range 100 {
					writeFile(t, join(dir, "d", fmt.Sprintf("lower-%03d", i)), "", 0o644)
				}
				mkdir(t, join(dir, "d", "sub"), 0o755)
			},
			Run: func(t *testing.T, dir string) {
				d := join(dir, "d")
				var want []string
				for i := range 100 {
					name := fmt.Sprintf("lower-%03d", i)
					if i%3 == 0 {
						ok(t, unix.Unlink(join(d, name)), "unlink lower file")
						continue
					}
					want = append(want, name)
				}
				for i := range 20 {
					name := fmt.Sprintf("upper-%03d", i)
					writeFile(t, join(d, name), "", 0o644)
					want = append(want, name)
				}
				// Delete and re-create: listed once, as the new file.
				ok(t, unix.Unlink(join(d, "lower-001")), "unlink")
				writeFile(t, join(d, "lower-001"), "again", 0o644)
				want = append(want, "sub")
				slices.Sort(want)
				wantNames(t, d, want...)
				got := map[string]uint8{}
				for _, e := range readDirents(t, d) {
					if _, dup := got[e.name]; dup {
						t.Fatalf("merged readdir: %q listed twice", e.name)
					}
					got[e.name] = e.typ
				}
				if got["sub"] != unix.DT_DIR || got["lower-002"] != unix.DT_REG || got["upper-000"] != unix.DT_REG {
					t.Fatalf("merged readdir d_type: sub %d lower-002 %d upper-000 %d", got["sub"], got["lower-002"], got["upper-000"])
				}
				wantContent(t, join(d, "lower-001"), "again")
			}},
		{Name: "dir_lower_rmdir",
			Lower: func(t *testing.T, dir string) {
				mkdir(t, join(dir, "d"), 0o755)
				writeFile(t, join(dir, "d", "a"), "", 0o644)
				mkdir(t, join(dir, "d", "sub"), 0o755)
				mkdir(t, join(dir, "e"), 0o755)
			},
			Run: func(t *testing.T, dir string) {
				d := join(dir, "d")
				// Its children live only in the lower layer: still not empty.
				wantErrno(t, unix.Rmdir(d), "rmdir of a lower dir with lower children", unix.ENOTEMPTY)
				ok(t, unix.Unlink(join(d, "a")), "unlink")
				wantErrno(t, unix.Rmdir(d), "rmdir of a lower dir with a lower subdir", unix.ENOTEMPTY)
				ok(t, unix.Rmdir(join(d, "sub")), "rmdir")
				ok(t, unix.Rmdir(d), "rmdir of an emptied lower dir")
				wantErrno(t, unix.Lstat(d, new(unix.Stat_t)), "lstat after rmdir", unix.ENOENT)
				// A new directory of that name is empty: no lower child shows through.
				ok(t, unix.Mkdir(d, 0o755), "mkdir over the removed lower dir")
				wantNames(t, d)
				wantErrno(t, unix.Lstat(join(d, "a"), new(unix.Stat_t)), "lstat of a child of the removed lower dir", unix.ENOENT)
				ok(t, unix.Rmdir(join(dir, "e")), "rmdir of an empty lower dir")
				wantNames(t, dir, "d")
			}},
	}
}

// countsSubdirs skips when the filesystem reports st_nlink 1 for
// directories: it does not count subdirectories (btrfs, many network and
// FUSE filesystems), which Linux allows.
func (s *suite) countsSubdirs(t *testing.T, d string) {
	t.Helper()
	if lstat(t, d).Nlink == 1 {
		s.unsupported(t, unix.ENOTSUP, "directory st_nlink counting subdirectories (nlink is 1)")
	}
}

func wantNlink(t *testing.T, path string, want uint64) {
	t.Helper()
	if got := uint64(lstat(t, path).Nlink); got != want {
		t.Fatalf("%s: st_nlink %d, want %d", path, got, want)
	}
}
