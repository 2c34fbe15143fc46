package posixtest

import (
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func getxattr(t *testing.T, path, name string) string {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := unix.Lgetxattr(path, name, buf)
	ok(t, err, "getxattr %s %s", path, name)
	return string(buf[:n])
}

func wantXattr(t *testing.T, path, name, want string) {
	t.Helper()
	if got := getxattr(t, path, name); got != want {
		t.Fatalf("getxattr %s %s: %q, want %q", path, name, got, want)
	}
}

// listUserXattrs lists path's user.* attributes, sorted (a filesystem may
// list security.* or system.* ones of its own too).
func listUserXattrs(t *testing.T, path string) []string {
	t.Helper()
	buf := make([]byte, 8192)
	n, err := unix.Llistxattr(path, buf)
	ok(t, err, "listxattr %s", path)
	var out []string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if strings.HasPrefix(name, "user.") {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

func wantXattrList(t *testing.T, path string, want ...string) {
	t.Helper()
	if got := listUserXattrs(t, path); !slices.Equal(got, want) {
		t.Fatalf("listxattr %s: %q, want %q", path, got, want)
	}
}

// xattrCases: user.* extended attributes.
func (s *suite) xattrCases() []Case {
	return []Case{
		{Name: "xattr", Run: func(t *testing.T, dir string) {
			p := join(dir, "f")
			writeFile(t, p, "data", 0o644)
			err := unix.Lsetxattr(p, "user.a", []byte("one"), 0)
			s.unsupported(t, err, "user.* xattrs")
			ok(t, err, "setxattr user.a")
			wantXattr(t, p, "user.a", "one")
			ok(t, unix.Lsetxattr(p, "user.a", []byte("replaced"), 0), "setxattr over an existing one")
			wantXattr(t, p, "user.a", "replaced")
			ok(t, unix.Lsetxattr(p, "user.empty", nil, 0), "setxattr with an empty value")
			wantXattr(t, p, "user.empty", "")
			bin := "\x00\x01\xff binary"
			ok(t, unix.Lsetxattr(p, "user.bin", []byte(bin), 0), "setxattr binary value")
			wantXattr(t, p, "user.bin", bin)
			wantXattrList(t, p, "user.a", "user.bin", "user.empty")
			// Size query with an empty buffer, and ERANGE for a short one.
			if n, err := unix.Lgetxattr(p, "user.a", nil); err != nil || n != len("replaced") {
				t.Fatalf("getxattr size query: %d, %v; want %d", n, err, len("replaced"))
			}
			_, err = unix.Lgetxattr(p, "user.a", make([]byte, 2))
			wantErrno(t, err, "getxattr into a short buffer", unix.ERANGE)
			if n, err := unix.Llistxattr(p, nil); err != nil || n < len("user.a\x00user.bin\x00user.empty\x00") {
				t.Fatalf("listxattr size query: %d, %v", n, err)
			}
			_, err = unix.Lgetxattr(p, "user.missing", make([]byte, 64))
			wantErrno(t, err, "getxattr of a missing attribute", unix.ENODATA)
			wantErrno(t, unix.Lsetxattr(p, "user.a", []byte("x"), unix.XATTR_CREATE), "XATTR_CREATE of an existing attribute", unix.EEXIST)
			wantErrno(t, unix.Lsetxattr(p, "user.new", []byte("x"), unix.XATTR_REPLACE), "XATTR_REPLACE of a missing attribute", unix.ENODATA)
			ok(t, unix.Lsetxattr(p, "user.new", []byte("created"), unix.XATTR_CREATE), "XATTR_CREATE of a new attribute")
			ok(t, unix.Lsetxattr(p, "user.new", []byte("replaced"), unix.XATTR_REPLACE), "XATTR_REPLACE of an existing attribute")
			wantXattr(t, p, "user.new", "replaced")
			ok(t, unix.Lremovexattr(p, "user.a"), "removexattr")
			_, err = unix.Lgetxattr(p, "user.a", make([]byte, 64))
			wantErrno(t, err, "getxattr after removexattr", unix.ENODATA)
			wantErrno(t, unix.Lremovexattr(p, "user.a"), "removexattr of a missing attribute", unix.ENODATA)
			wantXattrList(t, p, "user.bin", "user.empty", "user.new")
			wantContent(t, p, "data")
			// Through an fd, and on a directory.
			fd := open(t, p, unix.O_RDONLY, 0)
			defer closeIfOpen(&fd)
			ok(t, unix.Fsetxattr(fd, "user.fd", []byte("via fd"), 0), "fsetxattr")
			buf := make([]byte, 64)
			n, err := unix.Fgetxattr(fd, "user.fd", buf)
			if err != nil || string(buf[:n]) != "via fd" {
				t.Fatalf("fgetxattr: %q, %v", buf[:n], err)
			}
			d := join(dir, "d")
			mkdir(t, d, 0o755)
			ok(t, unix.Lsetxattr(d, "user.dir", []byte("on dir"), 0), "setxattr on a directory")
			wantXattr(t, d, "user.dir", "on dir")
			// Linux refuses user.* on a symlink.
			symlink(t, "f", join(dir, "l"))
			wantErrno(t, unix.Lsetxattr(join(dir, "l"), "user.x", []byte("x"), 0), "user.* xattr on a symlink", unix.EPERM)
			// Attributes of unknown namespaces are refused.
			wantErrno(t, unix.Lsetxattr(p, "bogus.x", []byte("x"), 0), "xattr of an unknown namespace", unix.EOPNOTSUPP)
		}},
		{Name: "xattr_lower",
			Lower: func(t *testing.T, dir string) {
				p := join(dir, "f")
				writeFile(t, p, "lower", 0o644)
				err := unix.Lsetxattr(p, "user.keep", []byte("kept"), 0)
				s.unsupported(t, err, "user.* xattrs")
				ok(t, err, "setxattr in the lower layer")
				ok(t, unix.Lsetxattr(p, "user.drop", []byte("dropped"), 0), "setxattr in the lower layer")
				mkdir(t, join(dir, "d"), 0o755)
				ok(t, unix.Lsetxattr(join(dir, "d"), "user.dir", []byte("lower dir"), 0), "setxattr on a lower dir")
				writeFile(t, join(dir, "w"), "lower", 0o644)
				ok(t, unix.Lsetxattr(join(dir, "w"), "user.w", []byte("w"), 0), "setxattr")
			},
			Run: func(t *testing.T, dir string) {
				p := join(dir, "f")
				wantXattr(t, p, "user.keep", "kept")
				wantXattrList(t, p, "user.drop", "user.keep")
				// A metadata copy-up keeps the other attributes and the data.
				ok(t, unix.Lsetxattr(p, "user.new", []byte("upper"), unix.XATTR_CREATE), "setxattr on a lower file")
				wantXattrList(t, p, "user.drop", "user.keep", "user.new")
				wantErrno(t, unix.Lsetxattr(p, "user.keep", []byte("x"), unix.XATTR_CREATE), "XATTR_CREATE of a lower attribute", unix.EEXIST)
				ok(t, unix.Lremovexattr(p, "user.drop"), "removexattr of a lower attribute")
				_, err := unix.Lgetxattr(p, "user.drop", make([]byte, 64))
				wantErrno(t, err, "getxattr of a removed lower attribute", unix.ENODATA)
				wantXattrList(t, p, "user.keep", "user.new")
				wantContent(t, p, "lower")
				wantXattr(t, join(dir, "d"), "user.dir", "lower dir")
				// A data copy-up keeps the attributes.
				fd := open(t, join(dir, "w"), unix.O_WRONLY|unix.O_APPEND, 0)
				defer closeIfOpen(&fd)
				write(t, fd, "+w")
				closeFd(t, &fd)
				wantXattr(t, join(dir, "w"), "user.w", "w")
				wantContent(t, join(dir, "w"), "lower+w")
			}},
	}
}
