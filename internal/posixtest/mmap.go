package posixtest

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func mmap(t *testing.T, fd, length, prot, flags int) []byte {
	t.Helper()
	m, err := unix.Mmap(fd, 0, length, prot, flags)
	ok(t, err, "mmap %d bytes", length)
	return m
}

// mmapCases: shared writable mappings, private mappings, and coherence
// with read(2) and write(2).
func (s *suite) mmapCases() []Case {
	return []Case{
		{Name: "mmap_shared", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			const size = 3 * 4096
			writeFile(t, p, strings.Repeat(".", size), 0o644)
			fd := open(t, p, unix.O_RDWR, 0)
			defer closeIfOpen(&fd)
			m := mmap(t, fd, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			defer unmap(&m)
			copy(m[0:], "first page")
			copy(m[4096+4090:], "spans a page boundary")
			ok(t, unix.Msync(m, unix.MS_SYNC), "msync")
			wantPread(t, fd, 0, "first page")
			wantPread(t, fd, 4096+4090, "spans a page boundary")
			// Another fd, opened after the write, reads it too.
			fd2 := open(t, p, unix.O_RDONLY, 0)
			defer closeIfOpen(&fd2)
			wantPread(t, fd2, 4096+4090, "spans a page boundary")
			// write(2) shows in the mapping.
			pwrite(t, fd2WR(t, p), "via write", 100)
			if got := string(m[100:109]); got != "via write" {
				t.Fatalf("the mapping after write(2): %q", got)
			}
			if st := fstat(t, fd); st.Size != size {
				t.Fatalf("mmap writes changed the size to %d", st.Size)
			}
			// Still there after unmap and close, through a new open.
			ok(t, unmap(&m), "munmap")
			closeFd(t, &fd)
			fd3 := open(t, p, unix.O_RDONLY, 0)
			defer closeIfOpen(&fd3)
			wantPread(t, fd3, 0, "first page")
		}},
		{Name: "mmap_private", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			writeFile(t, p, strings.Repeat("o", 4096), 0o644)
			fd := open(t, p, unix.O_RDONLY, 0)
			defer closeIfOpen(&fd)
			m := mmap(t, fd, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
			defer unmap(&m)
			copy(m, "private")
			if string(m[:7]) != "private" {
				t.Fatal("private mapping does not hold its own write")
			}
			wantContent(t, p, strings.Repeat("o", 4096))
			// A shared writable mapping needs a fd open for writing.
			_, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			wantErrno(t, err, "MAP_SHARED PROT_WRITE of an O_RDONLY fd", unix.EACCES)
		}},
		{Name: "mmap_shared_lower",
			Lower: func(t *testing.T, dir string) {
				writeFile(t, join(dir, "f"), strings.Repeat("L", 2*4096), 0o644)
				writeFile(t, join(dir, "r"), strings.Repeat("R", 4096), 0o644)
			},
			Run: func(t *testing.T, dir string) {
				p := join(dir, "f")
				fd := open(t, p, unix.O_RDWR, 0)
				defer closeIfOpen(&fd)
				m := mmap(t, fd, 2*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
				defer unmap(&m)
				if string(m[:4]) != "LLLL" {
					t.Fatalf("mapping of a lower file reads %q", m[:4])
				}
				copy(m[4095:], "mapped write")
				ok(t, unix.Msync(m, unix.MS_SYNC), "msync")
				ok(t, unmap(&m), "munmap")
				closeFd(t, &fd)
				// A new fd reads what went through the mapping, and the rest of
				// the lower data.
				fd2 := open(t, p, unix.O_RDONLY, 0)
				defer closeIfOpen(&fd2)
				wantPread(t, fd2, 4090, "LLLLLmapped writeLLLL")
				wantPread(t, fd2, 0, "LLLL")
				if st := fstat(t, fd2); st.Size != 2*4096 {
					t.Fatalf("size: %d", st.Size)
				}
				// A read-only shared mapping of a lower file (no copy-up).
				rfd := open(t, join(dir, "r"), unix.O_RDONLY, 0)
				defer closeIfOpen(&rfd)
				rm := mmap(t, rfd, 4096, unix.PROT_READ, unix.MAP_SHARED)
				defer unmap(&rm)
				if string(rm[:4]) != "RRRR" {
					t.Fatalf("read-only mapping of a lower file reads %q", rm[:4])
				}
			}},
		{Name: "mmap_shared_lower_live",
			Lower: func(t *testing.T, dir string) { writeFile(t, join(dir, "f"), strings.Repeat("L", 4096), 0o644) },
			Run: func(t *testing.T, dir string) {
				// Mapped shared-writable while mapped and open elsewhere: a
				// mapping, a reader opened before the copy-up and one after, all
				// one file.
				p := join(dir, "f")
				before := open(t, p, unix.O_RDONLY, 0)
				defer closeIfOpen(&before)
				fd := open(t, p, unix.O_RDWR, 0)
				defer closeIfOpen(&fd)
				m := mmap(t, fd, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
				defer unmap(&m)
				copy(m[10:], "live")
				ok(t, unix.Msync(m, unix.MS_SYNC), "msync")
				after := open(t, p, unix.O_RDONLY, 0)
				defer closeIfOpen(&after)
				wantPread(t, after, 8, "LLliveLL")
				wantPread(t, before, 8, "LLliveLL")
				pwrite(t, fd, "WRITE", 100)
				if got := string(m[100:105]); got != "WRITE" {
					t.Fatalf("the mapping after write(2): %q", got)
				}
			}},
	}
}

// fd2WR opens path for writing; closed when t ends.
func fd2WR(t *testing.T, path string) int {
	t.Helper()
	fd := open(t, path, unix.O_WRONLY, 0)
	t.Cleanup(func() { closeIfOpen(&fd) })
	return fd
}

// unmap unmaps *m unless already done; for defer.
func unmap(m *[]byte) error {
	if *m == nil {
		return nil
	}
	err := unix.Munmap(*m)
	*m = nil
	return err
}
