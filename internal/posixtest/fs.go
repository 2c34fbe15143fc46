package posixtest

import (
	"testing"

	"golang.org/x/sys/unix"
)

// fsCases: statfs, fsync, fdatasync.
func (s *suite) fsCases() []Case {
	return []Case{
		{Name: "statfs", Run: func(t *testing.T, dir string) {
			var st unix.Statfs_t
			ok(t, unix.Statfs(dir, &st), "statfs")
			if st.Bsize <= 0 || st.Blocks == 0 || st.Bfree > st.Blocks || st.Bavail > st.Bfree {
				t.Fatalf("statfs: bsize %d blocks %d bfree %d bavail %d: want bsize > 0, blocks > 0, bavail <= bfree <= blocks",
					st.Bsize, st.Blocks, st.Bfree, st.Bavail)
			}
			if st.Files != 0 && st.Ffree > st.Files {
				t.Fatalf("statfs: ffree %d > files %d", st.Ffree, st.Files)
			}
			if st.Namelen < 255 {
				t.Fatalf("statfs: namelen %d, want >= 255", st.Namelen)
			}
			if st.Frsize < 0 {
				t.Fatalf("statfs: frsize %d", st.Frsize)
			}
			// Room for the suite: at least 64 MiB free.
			if free := uint64(st.Bavail) * uint64(st.Bsize); free < 64<<20 {
				t.Fatalf("statfs: %d bytes available, want room for the suite (64 MiB)", free)
			}
			// fstatfs on a file in the directory agrees on the geometry.
			p := join(dir, "f")
			writeFile(t, p, "x", 0o644)
			fd := open(t, p, unix.O_RDONLY, 0)
			defer closeIfOpen(&fd)
			var fst unix.Statfs_t
			ok(t, unix.Fstatfs(fd, &fst), "fstatfs")
			if fst.Bsize != st.Bsize || fst.Blocks != st.Blocks || fst.Type != st.Type {
				t.Fatalf("fstatfs of a file: bsize %d blocks %d type %#x, statfs of its dir: %d %d %#x",
					fst.Bsize, fst.Blocks, fst.Type, st.Bsize, st.Blocks, st.Type)
			}
			// Names of the length the filesystem claims are accepted.
			long := make([]byte, 255)
			for i := range long {
				long[i] = 'n'
			}
			writeFile(t, join(dir, string(long)), "long name", 0o644)
			wantContent(t, join(dir, string(long)), "long name")
			_, err := unix.Open(join(dir, string(long)+"n"), unix.O_CREAT|unix.O_WRONLY, 0o644)
			wantErrno(t, err, "create with a 256-byte name", unix.ENAMETOOLONG)
		}},
		{Name: "fsync", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0o644)
			defer closeIfOpen(&fd)
			write(t, fd, "durable")
			ok(t, unix.Fsync(fd), "fsync")
			ok(t, unix.Fdatasync(fd), "fdatasync")
			ro := open(t, p, unix.O_RDONLY, 0)
			defer closeIfOpen(&ro)
			ok(t, unix.Fsync(ro), "fsync of an O_RDONLY fd")
			ok(t, unix.Fdatasync(ro), "fdatasync of an O_RDONLY fd")
			d := open(t, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			defer closeIfOpen(&d)
			ok(t, unix.Fsync(d), "fsync of a directory")
			ok(t, unix.SyncFileRange(fd, 0, 0, unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER), "sync_file_range")
			ok(t, unix.Syncfs(fd), "syncfs")
			wantContent(t, p, "durable")
		}},
		{Name: "fsync_lower",
			Lower: func(t *testing.T, dir string) { writeFile(t, join(dir, "f"), "lower", 0o644) },
			Run: func(t *testing.T, dir string) {
				p := join(dir, "f")
				ro := open(t, p, unix.O_RDONLY, 0)
				defer closeIfOpen(&ro)
				ok(t, unix.Fsync(ro), "fsync of a lower file open for reading")
				fd := open(t, p, unix.O_WRONLY|unix.O_APPEND, 0)
				defer closeIfOpen(&fd)
				write(t, fd, "+upper")
				ok(t, unix.Fsync(fd), "fsync of a copied-up file")
				ok(t, unix.Fdatasync(fd), "fdatasync of a copied-up file")
				d := open(t, dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
				defer closeIfOpen(&d)
				ok(t, unix.Fsync(d), "fsync of a lower directory")
				wantContent(t, p, "lower+upper")
			}},
	}
}
