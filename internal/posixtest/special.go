package posixtest

import (
	"testing"

	"golang.org/x/sys/unix"
)

// specialCases: mkfifo and mknod.
func (s *suite) specialCases() []Case {
	return []Case{
		{Name: "mkfifo", Run: func(t *testing.T, dir string) {
			p := join(dir, "fifo")
			ok(t, unix.Mkfifo(p, 0o640), "mkfifo")
			st := lstat(t, p)
			wantType(t, p, st, unix.S_IFIFO)
			wantPerm(t, p, st, 0o640)
			wantErrno(t, unix.Mkfifo(p, 0o640), "mkfifo over an existing name", unix.EEXIST)
			// The FIFO works: the kernel, not the filesystem, carries its data.
			fd := open(t, p, unix.O_RDWR|unix.O_NONBLOCK, 0)
			defer closeIfOpen(&fd)
			write(t, fd, "through the pipe")
			buf := make([]byte, 64)
			n, err := unix.Read(fd, buf)
			if err != nil || string(buf[:n]) != "through the pipe" {
				t.Fatalf("read from the fifo: %q, %v", buf[:n], err)
			}
			if st := lstat(t, p); st.Size != 0 {
				t.Fatalf("fifo size: %d", st.Size)
			}
			// mknod S_IFIFO, and S_IFREG (no privilege needed for either).
			ok(t, unix.Mknod(join(dir, "fifo2"), unix.S_IFIFO|0o600, 0), "mknod S_IFIFO")
			wantType(t, "fifo2", lstat(t, join(dir, "fifo2")), unix.S_IFIFO)
			ok(t, unix.Mknod(join(dir, "reg"), unix.S_IFREG|0o600, 0), "mknod S_IFREG")
			rst := lstat(t, join(dir, "reg"))
			wantType(t, "reg", rst, unix.S_IFREG)
			if rst.Size != 0 {
				t.Fatalf("mknod S_IFREG: size %d", rst.Size)
			}
			ok(t, unix.Unlink(p), "unlink fifo")
		}},
		{Name: "mknod_device", Run: func(t *testing.T, dir string) {
			p := join(dir, "null")
			dev := int(unix.Mkdev(1, 3))
			err := unix.Mknod(p, unix.S_IFCHR|0o666, dev)
			if !isRoot() {
				wantErrno(t, err, "mknod of a char device as non-root", unix.EPERM)
				return
			}
			ok(t, err, "mknod char device 1:3")
			st := lstat(t, p)
			wantType(t, p, st, unix.S_IFCHR)
			if st.Rdev != uint64(dev) {
				t.Fatalf("st_rdev %d:%d, want 1:3", unix.Major(st.Rdev), unix.Minor(st.Rdev))
			}
			bp := join(dir, "blk")
			ok(t, unix.Mknod(bp, unix.S_IFBLK|0o600, int(unix.Mkdev(7, 200))), "mknod block device 7:200")
			bst := lstat(t, bp)
			wantType(t, bp, bst, unix.S_IFBLK)
			if unix.Major(bst.Rdev) != 7 || unix.Minor(bst.Rdev) != 200 {
				t.Fatalf("block device st_rdev %d:%d, want 7:200", unix.Major(bst.Rdev), unix.Minor(bst.Rdev))
			}
			wantErrno(t, unix.Mknod(p, unix.S_IFCHR|0o666, dev), "mknod over an existing name", unix.EEXIST)
			// Opening the node is up to the mount's nodev flag; not tested.
		}},
		{Name: "mkfifo_lower",
			Lower: func(t *testing.T, dir string) {
				ok(t, unix.Mkfifo(join(dir, "fifo"), 0o644), "mkfifo")
			},
			Run: func(t *testing.T, dir string) {
				p := join(dir, "fifo")
				wantType(t, p, lstat(t, p), unix.S_IFIFO)
				ok(t, unix.Chmod(p, 0o600), "chmod of a lower fifo")
				st := lstat(t, p)
				wantType(t, p, st, unix.S_IFIFO)
				wantPerm(t, p, st, 0o600)
				fd := open(t, p, unix.O_RDWR|unix.O_NONBLOCK, 0)
				defer closeIfOpen(&fd)
				write(t, fd, "x")
			}},
	}
}
