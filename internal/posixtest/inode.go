package posixtest

import (
	"testing"

	"golang.org/x/sys/unix"
)

// inodeCases: inode numbers unique, stable while open, stable across
// copy-up.
func (s *suite) inodeCases() []Case {
	return []Case{
		{Name: "inode_stable_while_open", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			writeFile(t, p, "x", 0o644)
			ino := lstat(t, p).Ino
			fd := open(t, p, unix.O_RDWR, 0)
			defer closeIfOpen(&fd)
			check := func(what string, got uint64) {
				t.Helper()
				if got != ino {
					t.Fatalf("%s: ino %d, want %d", what, got, ino)
				}
			}
			check("fstat", fstat(t, fd).Ino)
			pwrite(t, fd, "grown", 1<<16)
			check("fstat after write", fstat(t, fd).Ino)
			check("lstat after write", lstat(t, p).Ino)
			ok(t, unix.Chmod(p, 0o600), "chmod")
			check("lstat after chmod", lstat(t, p).Ino)
			ok(t, unix.Rename(p, join(dir, "g")), "rename")
			check("lstat after rename", lstat(t, join(dir, "g")).Ino)
			check("fstat after rename", fstat(t, fd).Ino)
			ok(t, unix.Link(join(dir, "g"), join(dir, "h")), "link")
			check("lstat of a new link", lstat(t, join(dir, "h")).Ino)
			ok(t, unix.Unlink(join(dir, "g")), "unlink")
			ok(t, unix.Unlink(join(dir, "h")), "unlink")
			check("fstat after unlinking every name", fstat(t, fd).Ino)
		}},
		{Name: "inode_unique",
			Lower: func(t *testing.T, dir string) {
				writeFile(t, join(dir, "la"), "", 0o644)
				writeFile(t, join(dir, "lb"), "", 0o644)
				mkdir(t, join(dir, "ld"), 0o755)
				writeFile(t, join(dir, "ld", "lc"), "", 0o644)
			},
			Run: func(t *testing.T, dir string) {
				// Files of the lower and the upper layer: one device, distinct
				// inode numbers (tools such as tar, rsync and git rely on it).
				writeFile(t, join(dir, "ua"), "", 0o644)
				mkdir(t, join(dir, "ud"), 0o755)
				writeFile(t, join(dir, "ld", "uc"), "", 0o644)
				fd := open(t, join(dir, "lb"), unix.O_WRONLY, 0) // copy it up
				closeFd(t, &fd)
				seen := map[uint64]string{}
				dev := lstat(t, dir).Dev
				for _, p := range []string{".", "la", "lb", "ld", "ld/lc", "ua", "ud", "ld/uc"} {
					st := lstat(t, join(dir, p))
					if st.Dev != dev {
						t.Errorf("%s: st_dev %d, the directory's is %d", p, st.Dev, dev)
					}
					if other, dup := seen[st.Ino]; dup {
						t.Errorf("%s and %s share inode number %d", p, other, st.Ino)
					}
					seen[st.Ino] = p
				}
			}},
		{Name: "inode_stable_across_copyup",
			Lower: func(t *testing.T, dir string) {
				writeFile(t, join(dir, "f"), "lower", 0o644)
				writeFile(t, join(dir, "m"), "lower", 0o644)
				mkdir(t, join(dir, "d"), 0o755)
				writeFile(t, join(dir, "d", "in"), "lower", 0o644)
			},
			Run: func(t *testing.T, dir string) {
				p := join(dir, "f")
				ino := lstat(t, p).Ino
				check := func(what string, got uint64) {
					t.Helper()
					if got != ino {
						t.Fatalf("%s: ino %d, want the lower file's %d", what, got, ino)
					}
				}
				ro := open(t, p, unix.O_RDONLY, 0)
				defer closeIfOpen(&ro)
				check("fstat of a reader", fstat(t, ro).Ino)
				fd := open(t, p, unix.O_RDWR, 0)
				defer closeIfOpen(&fd)
				check("fstat after open for writing", fstat(t, fd).Ino)
				pwrite(t, fd, "UPPER", 0)
				check("fstat after the copy-up write", fstat(t, fd).Ino)
				check("lstat after the copy-up write", lstat(t, p).Ino)
				check("fstat of the reader opened before the copy-up", fstat(t, ro).Ino)
				closeFd(t, &fd)
				check("lstat after close", lstat(t, p).Ino)
				again := open(t, p, unix.O_RDONLY, 0)
				defer closeIfOpen(&again)
				check("fstat of a new fd", fstat(t, again).Ino)
				// A metadata-only copy-up.
				mino := lstat(t, join(dir, "m")).Ino
				ok(t, unix.Chmod(join(dir, "m"), 0o600), "chmod")
				if got := lstat(t, join(dir, "m")).Ino; got != mino {
					t.Fatalf("ino after chmod of a lower file: %d, want %d", got, mino)
				}
				// A directory that gets a new child (its own copy-up).
				dino := lstat(t, join(dir, "d")).Ino
				inino := lstat(t, join(dir, "d", "in")).Ino
				writeFile(t, join(dir, "d", "new"), "", 0o644)
				if got := lstat(t, join(dir, "d")).Ino; got != dino {
					t.Fatalf("ino of a lower dir after creating in it: %d, want %d", got, dino)
				}
				if got := lstat(t, join(dir, "d", "in")).Ino; got != inino {
					t.Fatalf("ino of a lower file after its dir changed: %d, want %d", got, inino)
				}
				if dd := stat(t, join(dir, "d", "..")).Ino; dd != lstat(t, dir).Ino {
					t.Fatalf("'..' of a lower dir: ino %d, want %d", dd, lstat(t, dir).Ino)
				}
			}},
		{Name: "inode_dir_stable_lower",
			Lower: func(t *testing.T, dir string) {
				mkdir(t, join(dir, "d"), 0o755)
				mkdir(t, join(dir, "d", "sub"), 0o755)
				writeFile(t, join(dir, "d", "sub", "f"), "lower", 0o644)
				writeFile(t, join(dir, "d", "g"), "lower", 0o644)
			},
			Run: func(t *testing.T, dir string) {
				// st_ino of a directory is stable across a write inside it
				// and equals readdir's d_ino (find -inum, ls -i, tar, du and
				// git's untracked cache compare them), as a file's does.
				paths := []string{"d", "d/sub", "d/sub/f", "d/g"}
				before := map[string]uint64{}
				for _, p := range paths {
					before[p] = lstat(t, join(dir, p)).Ino
				}
				writeFile(t, join(dir, "d", "sub", "new"), "", 0o644) // copies d and d/sub up
				fd := open(t, join(dir, "d", "g"), unix.O_WRONLY|unix.O_APPEND, 0)
				pwrite(t, fd, "more", 5)
				closeFd(t, &fd)
				for _, p := range paths {
					if got := lstat(t, join(dir, p)).Ino; got != before[p] {
						t.Errorf("%s: st_ino %d after a write inside, was %d", p, got, before[p])
					}
				}
				for _, d := range []string{".", "d", "d/sub"} {
					for _, e := range readDirents(t, join(dir, d)) {
						if e.name == "." || e.name == ".." {
							continue
						}
						if st := lstat(t, join(dir, d, e.name)); st.Ino != e.ino {
							t.Errorf("%s/%s: d_ino %d, st_ino %d", d, e.name, e.ino, st.Ino)
						}
					}
				}
			}},
	}
}
