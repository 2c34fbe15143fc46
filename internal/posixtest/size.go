package posixtest

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// unlinkCases: a file unlinked while open lives on through its fds.
func (s *suite) unlinkCases() []Case {
	return []Case{
		{Name: "unlink_open_file", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			writeFile(t, p, "before", 0o644)
			fd := open(t, p, unix.O_RDWR, 0)
			defer closeIfOpen(&fd)
			ino := fstat(t, fd).Ino
			ok(t, unix.Unlink(p), "unlink of an open file")
			wantErrno(t, unix.Lstat(p, new(unix.Stat_t)), "lstat after unlink", unix.ENOENT)
			wantNames(t, dir)
			wantPread(t, fd, 0, "before")
			pwrite(t, fd, "+after", 6)
			wantPread(t, fd, 0, "before+after")
			st := fstat(t, fd)
			if st.Nlink != 0 || st.Size != 12 || st.Ino != ino {
				t.Fatalf("fstat of the unlinked file: nlink %d size %d ino %d, want 0, 12, %d", st.Nlink, st.Size, st.Ino, ino)
			}
			ok(t, unix.Ftruncate(fd, 3), "ftruncate of an unlinked file")
			ok(t, unix.Fchmod(fd, 0o600), "fchmod of an unlinked file")
			ok(t, unix.Fsync(fd), "fsync of an unlinked file")
			// A new file of the same name is another file.
			writeFile(t, p, "new", 0o644)
			wantPread(t, fd, 0, "bef")
			wantContent(t, p, "new")
			if st := lstat(t, p); st.Nlink != 1 {
				t.Fatalf("new file: nlink %d", st.Nlink)
			}
		}},
		{Name: "unlink_open_lower_file",
			Lower: func(t *testing.T, dir string) {
				writeFile(t, join(dir, "r"), "lower r", 0o644)
				writeFile(t, join(dir, "w"), "lower w", 0o644)
			},
			Run: func(t *testing.T, dir string) {
				// Opened for reading only (never copied up), then unlinked.
				r := open(t, join(dir, "r"), unix.O_RDONLY, 0)
				defer closeIfOpen(&r)
				ok(t, unix.Unlink(join(dir, "r")), "unlink of an open lower file")
				wantPread(t, r, 0, "lower r")
				if st := fstat(t, r); st.Nlink != 0 {
					t.Fatalf("fstat of the unlinked lower file: nlink %d, want 0", st.Nlink)
				}
				// Opened for writing, unlinked, then written.
				w := open(t, join(dir, "w"), unix.O_RDWR, 0)
				defer closeIfOpen(&w)
				ok(t, unix.Unlink(join(dir, "w")), "unlink of a lower file open for writing")
				pwrite(t, w, "W", 0)
				wantPread(t, w, 0, "Wower w")
				if st := fstat(t, w); st.Nlink != 0 {
					t.Fatalf("fstat of the unlinked lower file: nlink %d, want 0", st.Nlink)
				}
				wantNames(t, dir)
			}},
	}
}

// sizeCases: truncate, ftruncate, fallocate, sparse files, files > 4 GiB.
func (s *suite) sizeCases() []Case {
	return []Case{
		{Name: "truncate", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			writeFile(t, p, "0123456789", 0o644)
			ok(t, unix.Truncate(p, 4), "truncate shrink")
			wantContent(t, p, "0123")
			// Grow again: the cut bytes must not come back.
			ok(t, unix.Truncate(p, 8), "truncate grow")
			wantContent(t, p, "0123"+zeros(4))
			fd := open(t, p, unix.O_RDWR, 0)
			defer closeIfOpen(&fd)
			ok(t, unix.Ftruncate(fd, 1<<20), "ftruncate grow to 1 MiB")
			if st := fstat(t, fd); st.Size != 1<<20 {
				t.Fatalf("size after ftruncate: %d", st.Size)
			}
			if got := pread(t, fd, 1<<20, 0); got[:4] != "0123" || !isZero(got[4:]) {
				t.Fatal("the grown region does not read as zeros")
			}
			ok(t, unix.Ftruncate(fd, 0), "ftruncate to 0")
			wantContent(t, p, "")
			wantErrno(t, unix.Truncate(p, -1), "truncate to a negative length", unix.EINVAL)
			wantErrno(t, unix.Truncate(dir, 0), "truncate of a directory", unix.EISDIR)
			ro := open(t, p, unix.O_RDONLY, 0)
			defer closeIfOpen(&ro)
			wantErrno(t, unix.Ftruncate(ro, 1), "ftruncate of an O_RDONLY fd", unix.EINVAL, unix.EBADF)
		}},
		{Name: "truncate_lower",
			Lower: func(t *testing.T, dir string) {
				writeFile(t, join(dir, "shrink"), strings.Repeat("s", 10000), 0o644)
				writeFile(t, join(dir, "grow"), "grow", 0o644)
			},
			Run: func(t *testing.T, dir string) {
				ok(t, unix.Truncate(join(dir, "shrink"), 3), "truncate of a lower file")
				wantContent(t, join(dir, "shrink"), "sss")
				ok(t, unix.Truncate(join(dir, "shrink"), 6), "truncate grow")
				wantContent(t, join(dir, "shrink"), "sss"+zeros(3))
				ok(t, unix.Truncate(join(dir, "grow"), 8192), "truncate grow of a lower file")
				if got := readFile(t, join(dir, "grow")); got[:4] != "grow" || len(got) != 8192 || !isZero(got[4:]) {
					t.Fatalf("grown lower file: %d bytes, prefix %q", len(got), got[:4])
				}
			}},
		{Name: "fallocate", Run: func(t *testing.T, dir string) {
			fd := open(t, join(dir, "f"), unix.O_CREAT|unix.O_RDWR, 0o644)
			defer closeIfOpen(&fd)
			err := unix.Fallocate(fd, 0, 0, 1<<20)
			s.unsupported(t, err, "fallocate")
			ok(t, err, "fallocate mode 0")
			st := fstat(t, fd)
			if st.Size != 1<<20 {
				t.Fatalf("size after fallocate of 1 MiB: %d", st.Size)
			}
			if st.Blocks*512 < 1<<20 {
				t.Fatalf("fallocate of 1 MiB: only %d bytes allocated", st.Blocks*512)
			}
			if !isZero(pread(t, fd, 1<<20, 0)) {
				t.Fatal("fallocated range does not read as zeros")
			}
			// KEEP_SIZE: blocks beyond the end, size unchanged.
			err = unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 1<<20, 1<<20)
			s.unsupported(t, err, "fallocate FALLOC_FL_KEEP_SIZE")
			ok(t, err, "fallocate KEEP_SIZE")
			st = fstat(t, fd)
			if st.Size != 1<<20 {
				t.Fatalf("size after fallocate KEEP_SIZE past the end: %d, want %d", st.Size, 1<<20)
			}
			if st.Blocks*512 < 2<<20 {
				t.Fatalf("fallocate KEEP_SIZE of 1 MiB past the end: %d bytes allocated in all, want >= 2 MiB", st.Blocks*512)
			}
			// Within the file, mode 0 keeps the data.
			pwrite(t, fd, "data", 100)
			ok(t, unix.Fallocate(fd, 0, 0, 4096), "fallocate over data")
			wantPread(t, fd, 96, zeros(4)+"data"+zeros(4))
			wantErrno(t, unix.Fallocate(fd, 0, 0, 0), "fallocate of length 0", unix.EINVAL)
		}},
		{Name: "fallocate_punch_hole", Run: func(t *testing.T, dir string) {
			fd := open(t, join(dir, "f"), unix.O_CREAT|unix.O_RDWR, 0o644)
			defer closeIfOpen(&fd)
			const chunk = 64 << 10
			pwrite(t, fd, strings.Repeat("a", chunk)+strings.Repeat("b", chunk)+strings.Repeat("c", chunk), 0)
			err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, chunk, chunk)
			s.unsupported(t, err, "fallocate FALLOC_FL_PUNCH_HOLE")
			ok(t, err, "fallocate PUNCH_HOLE|KEEP_SIZE")
			if st := fstat(t, fd); st.Size != 3*chunk {
				t.Fatalf("size after punching a hole: %d, want %d", st.Size, 3*chunk)
			}
			wantPread(t, fd, 0, strings.Repeat("a", chunk)+zeros(chunk)+strings.Repeat("c", chunk))
			// The kernel refuses PUNCH_HOLE without KEEP_SIZE.
			wantErrno(t, unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE, 0, 4096), "PUNCH_HOLE without KEEP_SIZE", unix.EOPNOTSUPP)
		}},
		{Name: "fallocate_lower",
			Lower: func(t *testing.T, dir string) {
				writeFile(t, join(dir, "f"), strings.Repeat("a", 8192)+strings.Repeat("b", 8192), 0o644)
			},
			Run: func(t *testing.T, dir string) {
				fd := open(t, join(dir, "f"), unix.O_RDWR, 0)
				defer closeIfOpen(&fd)
				err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 8192)
				s.unsupported(t, err, "fallocate FALLOC_FL_PUNCH_HOLE")
				ok(t, err, "punch a hole in a lower file")
				ok(t, unix.Fallocate(fd, 0, 16384, 4096), "fallocate to grow a lower file")
				wantContent(t, join(dir, "f"), zeros(8192)+strings.Repeat("b", 8192)+zeros(4096))
			}},
		{Name: "sparse_holes", Run: func(t *testing.T, dir string) {
			fd := open(t, join(dir, "f"), unix.O_CREAT|unix.O_RDWR, 0o644)
			defer closeIfOpen(&fd)
			const far = 16 << 20
			pwrite(t, fd, "head", 0)
			pwrite(t, fd, "tail", far)
			st := fstat(t, fd)
			if st.Size != far+4 {
				t.Fatalf("size: %d, want %d", st.Size, far+4)
			}
			if st.Blocks*512 >= far/2 {
				t.Fatalf("a 16 MiB file with 8 bytes of data uses %d bytes: not sparse", st.Blocks*512)
			}
			wantPread(t, fd, 0, "head"+zeros(4092))
			wantPread(t, fd, far-4096, zeros(4096)+"tail")
			// SEEK_DATA/SEEK_HOLE: a filesystem that does not track holes may
			// report the whole file as data, which Linux allows.
			hole, err := unix.Seek(fd, 0, unix.SEEK_HOLE)
			s.unsupported(t, err, "lseek SEEK_HOLE", unix.EINVAL)
			ok(t, err, "SEEK_HOLE")
			if hole < 4 || hole > far+4 {
				t.Fatalf("SEEK_HOLE from 0: %d, want in [4, %d]", hole, far+4)
			}
			data, err := unix.Seek(fd, 0, unix.SEEK_DATA)
			ok(t, err, "SEEK_DATA")
			if data != 0 {
				t.Fatalf("SEEK_DATA from 0: %d, want 0", data)
			}
			if data, err = unix.Seek(fd, 1<<20, unix.SEEK_DATA); err != nil || data < 1<<20 || data > far {
				t.Fatalf("SEEK_DATA from inside the hole: %d (%v), want in [%d, %d]", data, err, 1<<20, far)
			}
			_, err = unix.Seek(fd, far+4, unix.SEEK_DATA)
			wantErrno(t, err, "SEEK_DATA at the end of file", unix.ENXIO)
			_, err = unix.Seek(fd, far+100, unix.SEEK_HOLE)
			wantErrno(t, err, "SEEK_HOLE past the end of file", unix.ENXIO)
		}},
		{Name: "large_file", Run: func(t *testing.T, dir string) {
			// Sparse: 5 GiB of size, a few bytes of data.
			const off = 5 << 30
			p := join(dir, "big")
			fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0o644)
			defer closeIfOpen(&fd)
			pwrite(t, fd, "start", 0)
			pwrite(t, fd, "beyond 4 GiB", off)
			st := stat(t, p)
			if st.Size != off+12 {
				t.Fatalf("size: %d, want %d", st.Size, int64(off+12))
			}
			wantPread(t, fd, off-2, "\x00\x00beyond 4 GiB")
			wantPread(t, fd, 4<<30, zeros(4096))
			if end, err := unix.Seek(fd, 0, unix.SEEK_END); err != nil || end != off+12 {
				t.Fatalf("SEEK_END: %d (%v)", end, err)
			}
			// Data at offsets that truncate to small ones in 32 bits.
			pwrite(t, fd, "4G+1", 4<<30+1)
			wantPread(t, fd, 1, "tart")
			wantPread(t, fd, 4<<30+1, "4G+1")
			fd2 := open(t, p, unix.O_RDONLY, 0)
			defer closeIfOpen(&fd2)
			wantPread(t, fd2, off, "beyond 4 GiB")
			ok(t, unix.Ftruncate(fd, 4<<30+3), "ftruncate above 4 GiB")
			if st := fstat(t, fd2); st.Size != 4<<30+3 {
				t.Fatalf("size after ftruncate: %d", st.Size)
			}
			wantPread(t, fd2, 4<<30, "\x004G")
		}},
		{Name: "large_file_lower",
			Lower: func(t *testing.T, dir string) {
				fd := open(t, join(dir, "big"), unix.O_CREAT|unix.O_RDWR, 0o644)
				defer closeIfOpen(&fd)
				pwrite(t, fd, "lower start", 0)
				pwrite(t, fd, "lower end", 5<<30)
			},
			Run: func(t *testing.T, dir string) {
				// The copy-up of a sparse 5 GiB file must keep it sparse (and so
				// be quick) and keep its data at offsets past 4 GiB.
				p := join(dir, "big")
				fd := open(t, p, unix.O_RDWR, 0)
				defer closeIfOpen(&fd)
				pwrite(t, fd, "UPPER", 1<<30)
				st := fstat(t, fd)
				if st.Size != 5<<30+9 {
					t.Fatalf("size after copy-up: %d", st.Size)
				}
				if st.Blocks*512 > 64<<20 {
					t.Fatalf("copy-up made the sparse 5 GiB file use %d MiB: holes not kept", st.Blocks*512>>20)
				}
				wantPread(t, fd, 0, "lower start")
				wantPread(t, fd, 5<<30, "lower end")
				wantPread(t, fd, 1<<30-1, "\x00UPPER\x00")
				wantPread(t, fd, 3<<30, zeros(4096))
			}},
	}
}
