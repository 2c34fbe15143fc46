package posixtest

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// fileCases: regular files, O_CREAT/O_EXCL/O_TRUNC/O_APPEND, read, write,
// pread, pwrite.
func (s *suite) fileCases() []Case {
	return []Case{
		{Name: "file_create", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			// 0600 is not changed by any umask that keeps the owner's bits.
			fd := open(t, p, unix.O_CREAT|unix.O_WRONLY, 0o600)
			defer closeIfOpen(&fd)
			st := fstat(t, fd)
			wantType(t, p, st, unix.S_IFREG)
			wantPerm(t, p, st, 0o600)
			if st.Size != 0 || st.Nlink != 1 {
				t.Fatalf("new file: size %d nlink %d, want 0 and 1", st.Size, st.Nlink)
			}
			if st.Uid != uint32(unix.Geteuid()) || st.Gid != uint32(unix.Getegid()) {
				t.Fatalf("new file owned by %d:%d, want the creator %d:%d", st.Uid, st.Gid, unix.Geteuid(), unix.Getegid())
			}
			if lst := lstat(t, p); lst.Ino != st.Ino || lst.Dev != st.Dev {
				t.Fatalf("lstat after create: ino %d dev %d, fstat says ino %d dev %d", lst.Ino, lst.Dev, st.Ino, st.Dev)
			}
			// O_CREAT without O_EXCL opens an existing file; the mode is ignored.
			fd2 := open(t, p, unix.O_CREAT|unix.O_RDWR, 0o666)
			defer closeIfOpen(&fd2)
			wantPerm(t, p, fstat(t, fd2), 0o600)
		}},
		{Name: "file_excl", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			fd := open(t, p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
			closeFd(t, &fd)
			_, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
			wantErrno(t, err, "O_EXCL on an existing file", unix.EEXIST)
			ok(t, unix.Mkdir(join(dir, "d"), 0o755), "mkdir")
			_, err = unix.Open(join(dir, "d"), unix.O_CREAT|unix.O_EXCL|unix.O_RDONLY, 0o644)
			wantErrno(t, err, "O_EXCL on an existing directory", unix.EEXIST)
			// O_EXCL does not follow a symlink, even a dangling one.
			symlink(t, "nowhere", join(dir, "dangling"))
			_, err = unix.Open(join(dir, "dangling"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
			wantErrno(t, err, "O_EXCL on a dangling symlink", unix.EEXIST)
			if err := unix.Lstat(join(dir, "nowhere"), new(unix.Stat_t)); err == nil {
				t.Fatal("O_EXCL through a dangling symlink created its target")
			}
		}},
		{Name: "file_excl_lower",
			Lower: func(t *testing.T, dir string) { writeFile(t, join(dir, "f"), "lower", 0o644) },
			Run: func(t *testing.T, dir string) {
				_, err := unix.Open(join(dir, "f"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0o644)
				wantErrno(t, err, "O_EXCL on a lower file", unix.EEXIST)
				wantContent(t, join(dir, "f"), "lower")
				// After a delete (a whiteout over the lower file) the name is free.
				ok(t, unix.Unlink(join(dir, "f")), "unlink lower file")
				fd := open(t, join(dir, "f"), unix.O_CREAT|unix.O_EXCL|unix.O_RDWR, 0o644)
				defer closeIfOpen(&fd)
				if st := fstat(t, fd); st.Size != 0 {
					t.Fatalf("O_EXCL re-create over a deleted lower file: size %d, want 0", st.Size)
				}
				wantContent(t, join(dir, "f"), "")
			}},
		{Name: "file_trunc", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			writeFile(t, p, strings.Repeat("x", 10000), 0o644)
			fd := open(t, p, unix.O_WRONLY|unix.O_TRUNC, 0)
			defer closeIfOpen(&fd)
			if st := fstat(t, fd); st.Size != 0 {
				t.Fatalf("after O_TRUNC: size %d", st.Size)
			}
			write(t, fd, "ab")
			wantContent(t, p, "ab")
			// O_TRUNC on O_RDONLY is unspecified by POSIX; Linux truncates.
			// The suite does not test it.
		}},
		{Name: "file_trunc_lower",
			Lower: func(t *testing.T, dir string) { writeFile(t, join(dir, "f"), strings.Repeat("y", 10000), 0o640) },
			Run: func(t *testing.T, dir string) {
				p := join(dir, "f")
				fd := open(t, p, unix.O_RDWR|unix.O_TRUNC, 0)
				defer closeIfOpen(&fd)
				st := fstat(t, fd)
				if st.Size != 0 {
					t.Fatalf("O_TRUNC on a lower file: size %d", st.Size)
				}
				wantPerm(t, p, st, 0o640)
				write(t, fd, "new")
				wantContent(t, p, "new")
			}},
		{Name: "file_append", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			writeFile(t, p, "0", 0o644)
			a := open(t, p, unix.O_WRONLY|unix.O_APPEND, 0)
			defer closeIfOpen(&a)
			b := open(t, p, unix.O_WRONLY|unix.O_APPEND, 0)
			defer closeIfOpen(&b)
			plain := open(t, p, unix.O_WRONLY, 0)
			defer closeIfOpen(&plain)
			write(t, a, "a1")
			write(t, b, "b1")
			write(t, a, "a2")
			pwrite(t, plain, "P", 7) // grows the file to 8 bytes: "0a1b1a2P"
			write(t, b, "b2")
			// On Linux pwrite on an O_APPEND fd appends, whatever the offset.
			pwrite(t, a, "c", 0)
			wantContent(t, p, "0a1b1a2Pb2c")
			if off, err := unix.Seek(b, 0, unix.SEEK_CUR); err != nil || off != 10 {
				t.Fatalf("offset of the O_APPEND fd after its write: %d (%v), want 10", off, err)
			}
		}},
		{Name: "file_append_concurrent", Run: func(t *testing.T, dir string) {
			// Writers on separate O_APPEND fds: no record lost, none torn.
			p := join(dir, "log")
			writeFile(t, p, "", 0o644)
			const writers, records = 4, 200
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for w := range writers {
				fd := open(t, p, unix.O_WRONLY|unix.O_APPEND, 0)
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer closeIfOpen(&fd)
					for r := range records {
						rec := fmt.Sprintf("w%d-r%03d-%s\n", w, r, strings.Repeat(string(rune('a'+w)), 50))
						if n, err := unix.Write(fd, []byte(rec)); err != nil || n != len(rec) {
							errs <- fmt.Errorf("writer %d record %d: wrote %d of %d: %v", w, r, n, len(rec), err)
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(readFile(t, p), "\n"), "\n")
			if len(lines) != writers*records {
				t.Fatalf("%d records in the file, want %d", len(lines), writers*records)
			}
			next := make([]int, writers)
			for i, l := range lines {
				var w, r int
				var tail string
				if _, err := fmt.Sscanf(l, "w%d-r%d-%s", &w, &r, &tail); err != nil || w < 0 || w >= writers ||
					tail != strings.Repeat(string(rune('a'+w)), 50) {
					t.Fatalf("record %d torn or overwritten: %q", i, l)
				}
				if r != next[w] {
					t.Fatalf("writer %d: record %d where %d was due (lost or reordered)", w, r, next[w])
				}
				next[w]++
			}
		}},
		{Name: "file_readwrite", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0o644)
			defer closeIfOpen(&fd)
			write(t, fd, "hello world")
			if off, _ := unix.Seek(fd, 0, unix.SEEK_CUR); off != 11 {
				t.Fatalf("offset after write: %d, want 11", off)
			}
			pwrite(t, fd, "W", 6)
			wantPread(t, fd, 0, "hello World")
			if off, _ := unix.Seek(fd, 0, unix.SEEK_CUR); off != 11 {
				t.Fatalf("pread/pwrite moved the offset to %d", off)
			}
			// A read at the end of file returns 0 bytes.
			buf := make([]byte, 4)
			if n, err := unix.Read(fd, buf); n != 0 || err != nil {
				t.Fatalf("read at end of file: %d bytes, %v; want 0, nil", n, err)
			}
			// pwrite beyond the end leaves a hole that reads as zeros.
			pwrite(t, fd, "end", 100)
			if st := fstat(t, fd); st.Size != 103 {
				t.Fatalf("size after pwrite at 100: %d, want 103", st.Size)
			}
			wantPread(t, fd, 11, zeros(89)+"end")
			// Sequential read from the start through a second fd.
			fd2 := open(t, p, unix.O_RDONLY, 0)
			defer closeIfOpen(&fd2)
			n, err := unix.Read(fd2, buf)
			if err != nil || string(buf[:n]) != "hell" {
				t.Fatalf("read through a second fd: %q, %v", buf[:n], err)
			}
			// A large write and read back, past any page or request size.
			big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB
			pwrite(t, fd, big, 4093)
			wantPread(t, fd2, 4093, big)
		}},
		{Name: "file_badfd", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			writeFile(t, p, "data", 0o644)
			ro := open(t, p, unix.O_RDONLY, 0)
			defer closeIfOpen(&ro)
			_, err := unix.Write(ro, []byte("x"))
			wantErrno(t, err, "write to an O_RDONLY fd", unix.EBADF)
			wo := open(t, p, unix.O_WRONLY, 0)
			defer closeIfOpen(&wo)
			_, err = unix.Read(wo, make([]byte, 4))
			wantErrno(t, err, "read from an O_WRONLY fd", unix.EBADF)
			wantContent(t, p, "data")
		}},
		{Name: "file_lower_readwrite",
			Lower: func(t *testing.T, dir string) {
				writeFile(t, join(dir, "f"), strings.Repeat("L", 20000), 0o644)
				writeFile(t, join(dir, "empty"), "", 0o644)
			},
			Run: func(t *testing.T, dir string) {
				p := join(dir, "f")
				ro := open(t, p, unix.O_RDONLY, 0)
				defer closeIfOpen(&ro)
				wantPread(t, ro, 19990, strings.Repeat("L", 10))
				// The first write copies the file up; the rest of its data stays.
				rw := open(t, p, unix.O_RDWR, 0)
				defer closeIfOpen(&rw)
				pwrite(t, rw, "MID", 10000)
				wantContent(t, p, strings.Repeat("L", 10000)+"MID"+strings.Repeat("L", 9997))
				if st := stat(t, p); st.Size != 20000 {
					t.Fatalf("size after copy-up write: %d", st.Size)
				}
				e := open(t, join(dir, "empty"), unix.O_WRONLY|unix.O_APPEND, 0)
				defer closeIfOpen(&e)
				write(t, e, "appended")
				wantContent(t, join(dir, "empty"), "appended")
			}},
		{Name: "file_lower_reader_sees_copyup",
			Lower: func(t *testing.T, dir string) { writeFile(t, join(dir, "f"), strings.Repeat("L", 8192), 0o644) },
			Run: func(t *testing.T, dir string) {
				// A fd opened for reading before the copy-up sees a write made
				// after it: one file, not two (overlayfs famously fails this).
				p := join(dir, "f")
				ro := open(t, p, unix.O_RDONLY, 0)
				defer closeIfOpen(&ro)
				wantPread(t, ro, 0, "LL")
				rw := open(t, p, unix.O_WRONLY, 0)
				defer closeIfOpen(&rw)
				pwrite(t, rw, "NEW", 4096)
				wantPread(t, ro, 4095, "LNEWL")
				if st := fstat(t, ro); st.Size != 8192 {
					t.Fatalf("fstat of the older fd: size %d", st.Size)
				}
				pwrite(t, rw, "TAIL", 8192)
				if st := fstat(t, ro); st.Size != 8196 {
					t.Fatalf("fstat of the older fd after growth: size %d, want 8196", st.Size)
				}
			}},
	}
}
