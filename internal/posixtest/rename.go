package posixtest

import (
	"testing"

	"golang.org/x/sys/unix"
)

func renameat2(oldpath, newpath string, flags uint) error {
	return unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, flags)
}

// renameCases: rename of files and directories, over existing names, with
// RENAME_NOREPLACE and RENAME_EXCHANGE, and of lower directories.
func (s *suite) renameCases() []Case {
	return []Case{
		{Name: "rename_file", Run: func(t *testing.T, dir string) {
			a, b, c := join(dir, "a"), join(dir, "b"), join(dir, "c")
			writeFile(t, a, "A", 0o644)
			ino := lstat(t, a).Ino
			ok(t, unix.Rename(a, b), "rename to a new name")
			wantErrno(t, unix.Lstat(a, new(unix.Stat_t)), "lstat of the old name", unix.ENOENT)
			if st := lstat(t, b); st.Ino != ino {
				t.Fatalf("rename changed the inode number: %d -> %d", ino, st.Ino)
			}
			wantContent(t, b, "A")
			// Over an existing file: replaced atomically; an open fd on the
			// replaced file still reads it.
			writeFile(t, c, "C", 0o644)
			cfd := open(t, c, unix.O_RDONLY, 0)
			defer closeIfOpen(&cfd)
			ok(t, unix.Rename(b, c), "rename over an existing file")
			wantContent(t, c, "A")
			if st := lstat(t, c); st.Ino != ino || st.Nlink != 1 {
				t.Fatalf("after rename over: ino %d nlink %d, want ino %d nlink 1", st.Ino, st.Nlink, ino)
			}
			wantPread(t, cfd, 0, "C")
			if st := fstat(t, cfd); st.Nlink != 0 {
				t.Fatalf("the replaced file: st_nlink %d, want 0", st.Nlink)
			}
			wantNames(t, dir, "c")
			// Onto itself, and between two names of one inode: nothing happens.
			ok(t, unix.Rename(c, c), "rename onto itself")
			ok(t, unix.Link(c, join(dir, "h")), "link")
			ok(t, unix.Rename(c, join(dir, "h")), "rename between two links of one inode")
			wantNames(t, dir, "c", "h")
			wantNlink(t, c, 2)
			// Into another directory.
			ok(t, unix.Mkdir(join(dir, "d"), 0o755), "mkdir")
			ok(t, unix.Rename(join(dir, "h"), join(dir, "d", "h")), "rename into a subdir")
			wantContent(t, join(dir, "d", "h"), "A")
			wantNames(t, dir, "c", "d")
		}},
		{Name: "rename_dir", Run: func(t *testing.T, dir string) {
			d, e := join(dir, "d"), join(dir, "e")
			mkdir(t, d, 0o755)
			writeFile(t, join(d, "f"), "in d", 0o644)
			mkdir(t, join(d, "sub"), 0o755)
			ino := lstat(t, d).Ino
			// Over an empty directory.
			mkdir(t, e, 0o755)
			ok(t, unix.Rename(d, e), "rename a directory over an empty directory")
			if st := lstat(t, e); st.Ino != ino {
				t.Fatalf("renamed directory: ino %d, want %d", st.Ino, ino)
			}
			wantContent(t, join(e, "f"), "in d")
			wantNames(t, e, "f", "sub")
			wantErrno(t, unix.Lstat(d, new(unix.Stat_t)), "lstat of the old name", unix.ENOENT)
			// Into another directory: ".." follows.
			mkdir(t, join(dir, "p"), 0o755)
			ok(t, unix.Rename(e, join(dir, "p", "e")), "rename a directory into another")
			if dd, pp := stat(t, join(dir, "p", "e", "..")), stat(t, join(dir, "p")); dd.Ino != pp.Ino {
				t.Fatalf("'..' of the moved directory: ino %d, want its new parent's %d", dd.Ino, pp.Ino)
			}
			wantContent(t, join(dir, "p", "e", "f"), "in d")
		}},
		{Name: "rename_dir_over_nonempty", Run: func(t *testing.T, dir string) {
			d, e := join(dir, "d"), join(dir, "e")
			mkdir(t, d, 0o755)
			mkdir(t, e, 0o755)
			writeFile(t, join(e, "keep"), "", 0o644)
			wantErrno(t, unix.Rename(d, e), "rename a directory over a non-empty one", unix.ENOTEMPTY, unix.EEXIST)
			wantNames(t, e, "keep")
			wantNames(t, dir, "d", "e")
		}},
		{Name: "rename_file_over_dir", Run: func(t *testing.T, dir string) {
			writeFile(t, join(dir, "f"), "", 0o644)
			mkdir(t, join(dir, "d"), 0o755)
			wantErrno(t, unix.Rename(join(dir, "f"), join(dir, "d")), "rename a file over a directory", unix.EISDIR)
			wantErrno(t, unix.Rename(join(dir, "d"), join(dir, "f")), "rename a directory over a file", unix.ENOTDIR)
			wantType(t, "f", lstat(t, join(dir, "f")), unix.S_IFREG)
			wantType(t, "d", lstat(t, join(dir, "d")), unix.S_IFDIR)
		}},
		{Name: "rename_into_own_subdir", Run: func(t *testing.T, dir string) {
			d := join(dir, "d")
			mkdir(t, d, 0o755)
			mkdir(t, join(d, "sub"), 0o755)
			wantErrno(t, unix.Rename(d, join(d, "sub", "x")), "rename a directory into its own subdir", unix.EINVAL)
			wantErrno(t, unix.Rename(d, join(d, "x")), "rename a directory into itself", unix.EINVAL)
			wantNames(t, d, "sub")
		}},
		{Name: "rename_noreplace", Run: func(t *testing.T, dir string) {
			a, b := join(dir, "a"), join(dir, "b")
			writeFile(t, a, "A", 0o644)
			writeFile(t, b, "B", 0o644)
			err := renameat2(a, b, unix.RENAME_NOREPLACE)
			s.unsupported(t, err, "renameat2 RENAME_NOREPLACE", unix.EINVAL)
			wantErrno(t, err, "RENAME_NOREPLACE over an existing file", unix.EEXIST)
			wantContent(t, a, "A")
			wantContent(t, b, "B")
			mkdir(t, join(dir, "d"), 0o755)
			wantErrno(t, renameat2(a, join(dir, "d"), unix.RENAME_NOREPLACE), "RENAME_NOREPLACE over a directory", unix.EEXIST)
			ok(t, renameat2(a, join(dir, "c"), unix.RENAME_NOREPLACE), "RENAME_NOREPLACE to a new name")
			wantContent(t, join(dir, "c"), "A")
			wantNames(t, dir, "b", "c", "d")
		}},
		{Name: "rename_exchange", Run: func(t *testing.T, dir string) {
			f, d := join(dir, "f"), join(dir, "d")
			writeFile(t, f, "file", 0o644)
			mkdir(t, d, 0o755)
			writeFile(t, join(d, "child"), "child", 0o644)
			fino, dino := lstat(t, f).Ino, lstat(t, d).Ino
			err := renameat2(f, d, unix.RENAME_EXCHANGE)
			s.unsupported(t, err, "renameat2 RENAME_EXCHANGE", unix.EINVAL)
			ok(t, err, "RENAME_EXCHANGE of a file and a directory")
			sf, sd := lstat(t, f), lstat(t, d)
			wantType(t, f, sf, unix.S_IFDIR)
			wantType(t, d, sd, unix.S_IFREG)
			if sf.Ino != dino || sd.Ino != fino {
				t.Fatalf("after exchange: inodes %d and %d, want %d and %d", sf.Ino, sd.Ino, dino, fino)
			}
			wantContent(t, d, "file")
			wantContent(t, join(f, "child"), "child")
			wantErrno(t, renameat2(f, join(dir, "missing"), unix.RENAME_EXCHANGE), "RENAME_EXCHANGE with a missing name", unix.ENOENT)
			wantErrno(t, renameat2(f, d, unix.RENAME_EXCHANGE|unix.RENAME_NOREPLACE), "RENAME_EXCHANGE|RENAME_NOREPLACE", unix.EINVAL)
		}},
		{Name: "rename_lower_file",
			Lower: func(t *testing.T, dir string) {
				writeFile(t, join(dir, "a"), "lower A", 0o644)
				writeFile(t, join(dir, "b"), "lower B", 0o644)
			},
			Run: func(t *testing.T, dir string) {
				a, b := join(dir, "a"), join(dir, "b")
				ino := lstat(t, a).Ino
				ok(t, unix.Rename(a, b), "rename a lower file over another")
				wantContent(t, b, "lower A")
				if st := lstat(t, b); st.Ino != ino {
					t.Fatalf("renamed lower file: ino %d, want %d", st.Ino, ino)
				}
				wantErrno(t, unix.Lstat(a, new(unix.Stat_t)), "lstat of the old name", unix.ENOENT)
				wantNames(t, dir, "b")
				// The old name is free: a new file there is new and empty.
				fd := open(t, a, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR, 0o644)
				defer closeIfOpen(&fd)
				if st := fstat(t, fd); st.Size != 0 || st.Ino == ino {
					t.Fatalf("new file at the old name: size %d ino %d", st.Size, st.Ino)
				}
				wantContent(t, b, "lower A")
			}},
		{Name: "rename_lower_dir",
			Lower: func(t *testing.T, dir string) {
				mkdir(t, join(dir, "d"), 0o755)
				writeFile(t, join(dir, "d", "x"), "lower x", 0o644)
				mkdir(t, join(dir, "d", "sub"), 0o750)
				writeFile(t, join(dir, "d", "sub", "y"), "lower y", 0o600)
				symlink(t, "../x", join(dir, "d", "sub", "l"))
			},
			Run: func(t *testing.T, dir string) {
				d, e := join(dir, "d"), join(dir, "e")
				ino := lstat(t, d).Ino
				ok(t, unix.Rename(d, e), "rename a lower directory with children")
				if st := lstat(t, e); st.Ino != ino {
					t.Fatalf("renamed lower dir: ino %d, want %d", st.Ino, ino)
				}
				wantNames(t, e, "sub", "x")
				wantNames(t, join(e, "sub"), "l", "y")
				wantContent(t, join(e, "x"), "lower x")
				wantContent(t, join(e, "sub", "y"), "lower y")
				wantContent(t, join(e, "sub", "l"), "lower x")
				wantPerm(t, "e/sub", lstat(t, join(e, "sub")), 0o750)
				wantPerm(t, "e/sub/y", lstat(t, join(e, "sub", "y")), 0o600)
				wantErrno(t, unix.Lstat(d, new(unix.Stat_t)), "lstat of the old name", unix.ENOENT)
				wantErrno(t, unix.Lstat(join(d, "x"), new(unix.Stat_t)), "lstat of an old child", unix.ENOENT)
				// The children are writable where they moved to.
				fd := open(t, join(e, "sub", "y"), unix.O_WRONLY|unix.O_APPEND, 0)
				defer closeIfOpen(&fd)
				write(t, fd, "+w")
				closeFd(t, &fd)
				wantContent(t, join(e, "sub", "y"), "lower y+w")
				// A new directory at the old name is empty: nothing shows through.
				mkdir(t, d, 0o755)
				wantNames(t, d)
				wantNames(t, dir, "d", "e")
				// Renamed again, and back to where it came from.
				ok(t, unix.Rmdir(d), "rmdir")
				ok(t, unix.Rename(e, join(dir, "f")), "second rename")
				ok(t, unix.Rename(join(dir, "f"), d), "rename back to the lower name")
				wantNames(t, d, "sub", "x")
				wantContent(t, join(d, "sub", "y"), "lower y+w")
			}},
		{Name: "rename_lower_dir_over_lower_dir",
			Lower: func(t *testing.T, dir string) {
				mkdir(t, join(dir, "src"), 0o755)
				writeFile(t, join(dir, "src", "s"), "s", 0o644)
				mkdir(t, join(dir, "empty"), 0o755)
				mkdir(t, join(dir, "full"), 0o755)
				writeFile(t, join(dir, "full", "f"), "f", 0o644)
				mkdir(t, join(dir, "emptied"), 0o755)
				writeFile(t, join(dir, "emptied", "gone"), "", 0o644)
			},
			Run: func(t *testing.T, dir string) {
				src := join(dir, "src")
				wantErrno(t, unix.Rename(src, join(dir, "full")), "rename over a lower dir with lower children", unix.ENOTEMPTY, unix.EEXIST)
				wantNames(t, join(dir, "full"), "f")
				ok(t, unix.Unlink(join(dir, "emptied", "gone")), "unlink")
				ok(t, unix.Rename(src, join(dir, "emptied")), "rename over a lower dir emptied in this layer")
				wantNames(t, join(dir, "emptied"), "s")
				ok(t, unix.Rename(join(dir, "emptied"), join(dir, "empty")), "rename over an empty lower dir")
				wantNames(t, join(dir, "empty"), "s")
				wantNames(t, dir, "empty", "full")
			}},
		{Name: "rename_exchange_lower",
			Lower: func(t *testing.T, dir string) {
				writeFile(t, join(dir, "f"), "lower file", 0o644)
				mkdir(t, join(dir, "d"), 0o755)
				writeFile(t, join(dir, "d", "child"), "lower child", 0o644)
			},
			Run: func(t *testing.T, dir string) {
				f, d := join(dir, "f"), join(dir, "d")
				err := renameat2(f, d, unix.RENAME_EXCHANGE)
				s.unsupported(t, err, "renameat2 RENAME_EXCHANGE", unix.EINVAL)
				ok(t, err, "RENAME_EXCHANGE of a lower file and a lower directory")
				wantContent(t, d, "lower file")
				wantNames(t, f, "child")
				wantContent(t, join(f, "child"), "lower child")
				// And back.
				ok(t, renameat2(f, d, unix.RENAME_EXCHANGE), "second RENAME_EXCHANGE")
				wantContent(t, f, "lower file")
				wantContent(t, join(d, "child"), "lower child")
			}},
	}
}
