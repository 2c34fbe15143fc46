package posixtest

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/arbor-dev/arbor/internal/testenv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// suite holds what the cases need to know about the Env they run on.
type suite struct {
	strict bool // unsupported features fail instead of skipping
}

// unsupportedErrnos are the answers of a filesystem that lacks a feature.
var unsupportedErrnos = []unix.Errno{unix.ENOTSUP, unix.EOPNOTSUPP, unix.ENOSYS}

// unsupported skips the case (or, on a strict Env, fails it) when err says
// the filesystem lacks the feature what, and when err is one of also (the
// call's own way to say so, such as EINVAL for an unknown flag). It returns
// normally otherwise.
func (s *suite) unsupported(t *testing.T, err error, what string, also ...unix.Errno) {
	t.Helper()
	if err == nil {
		return
	}
	for _, e := range append(also, unsupportedErrnos...) {
		if errors.Is(err, e) {
			if s.strict {
				t.Fatalf("%s: unsupported by this filesystem, and the Env is strict: %v", what, err)
			}
			t.Skipf("%s: unsupported by this filesystem: %v", what, err)
		}
	}
}

// requireRoot skips unless the test runs as root; where ARBOR_TEST_REQUIRE
// names root it fails instead.
func requireRoot(t *testing.T) {
	t.Helper()
	testenv.NeedRoot(t, "for uid 65534 checks, chown and device nodes")
}

func isRoot() bool { return os.Geteuid() == 0 }

// ok fails t if err is not nil.
func ok(t *testing.T, err error, op string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(op, args...), err)
	}
}

// wantErrno fails t unless err is one of want.
func wantErrno(t *testing.T, err error, op string, want ...unix.Errno) {
	t.Helper()
	if e := checkErrno(err, op, want...); e != nil {
		t.Fatal(e)
	}
}

// checkErrno returns an error unless err is one of want.
func checkErrno(err error, op string, want ...unix.Errno) error {
	for _, w := range want {
		if errors.Is(err, w) {
			return nil
		}
	}
	names := make([]string, len(want))
	for i, w := range want {
		names[i] = unix.ErrnoName(w)
	}
	got := "success"
	if err != nil {
		got = err.Error()
		var en unix.Errno
		if errors.As(err, &en) {
			got = fmt.Sprintf("%s (%v)", unix.ErrnoName(en), err)
		}
	}
	return fmt.Errorf("%s: want %s, got %s", op, strings.Join(names, " or "), got)
}

// checkOK returns err with op as context, or nil.
func checkOK(err error, op string) error {
	if err != nil {
		return fmt.Errorf("%s: want success, got %w", op, err)
	}
	return nil
}

func writeFile(t *testing.T, path, data string, perm os.FileMode) {
	t.Helper()
	ok(t, os.WriteFile(path, []byte(data), perm), "write %s", path)
	// WriteFile's mode is subject to the umask; the cases want it exact.
	ok(t, os.Chmod(path, perm), "chmod %s", path)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	ok(t, err, "read %s", path)
	return string(b)
}

func wantContent(t *testing.T, path, want string) {
	t.Helper()
	if got := readFile(t, path); got != want {
		t.Fatalf("content of %s: got %q, want %q", path, trunc(got), trunc(want))
	}
}

func trunc(s string) string {
	if len(s) > 80 {
		return fmt.Sprintf("%s...(%d bytes)", s[:80], len(s))
	}
	return s
}

func mkdir(t *testing.T, path string, perm uint32) {
	t.Helper()
	ok(t, unix.Mkdir(path, perm), "mkdir %s", path)
	ok(t, unix.Chmod(path, perm), "chmod %s", path)
}

func symlink(t *testing.T, target, path string) {
	t.Helper()
	ok(t, unix.Symlink(target, path), "symlink %s -> %s", path, target)
}

func lstat(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	ok(t, unix.Lstat(path, &st), "lstat %s", path)
	return st
}

func stat(t *testing.T, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	ok(t, unix.Stat(path, &st), "stat %s", path)
	return st
}

func fstat(t *testing.T, fd int) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	ok(t, unix.Fstat(fd, &st), "fstat %d", fd)
	return st
}

// open opens path; the caller closes the fd (a deferred unix.Close runs on
// t.Fatal too).
func open(t *testing.T, path string, flags int, perm uint32) int {
	t.Helper()
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, perm)
	ok(t, err, "open %s", path)
	return fd
}

// closeFd closes *fd and marks it closed (-1), so that a deferred
// closeIfOpen does not close the number again: by then it may be another
// file's, perhaps a FUSE server's in this very process.
func closeFd(t *testing.T, fd *int) {
	t.Helper()
	if *fd < 0 {
		t.Fatal("close of a closed fd")
	}
	err := unix.Close(*fd)
	*fd = -1
	ok(t, err, "close")
}

// closeIfOpen closes *fd unless closeFd already did; for defer.
func closeIfOpen(fd *int) {
	if *fd >= 0 {
		unix.Close(*fd)
		*fd = -1
	}
}

func pwrite(t *testing.T, fd int, data string, off int64) {
	t.Helper()
	n, err := unix.Pwrite(fd, []byte(data), off)
	ok(t, err, "pwrite %d bytes at %d", len(data), off)
	if n != len(data) {
		t.Fatalf("pwrite at %d: wrote %d of %d bytes", off, n, len(data))
	}
}

func write(t *testing.T, fd int, data string) {
	t.Helper()
	n, err := unix.Write(fd, []byte(data))
	ok(t, err, "write %d bytes", len(data))
	if n != len(data) {
		t.Fatalf("write: wrote %d of %d bytes", n, len(data))
	}
}

// pread reads exactly n bytes at off (fewer only at end of file).
func pread(t *testing.T, fd int, n int, off int64) string {
	t.Helper()
	buf := make([]byte, n)
	got := 0
	for got < n {
		m, err := unix.Pread(fd, buf[got:], off+int64(got))
		ok(t, err, "pread %d bytes at %d", n, off)
		if m == 0 {
			break
		}
		got += m
	}
	return string(buf[:got])
}

func wantPread(t *testing.T, fd int, off int64, want string) {
	t.Helper()
	if got := pread(t, fd, len(want), off); got != want {
		t.Fatalf("pread %d bytes at %d: got %q, want %q", len(want), off, trunc(got), trunc(want))
	}
}

func zeros(n int) string { return string(make([]byte, n)) }

func isZero(s string) bool { return len(bytes.Trim([]byte(s), "\x00")) == 0 }

func fileType(m uint32) uint32 { return m & unix.S_IFMT }

func wantType(t *testing.T, path string, st unix.Stat_t, want uint32) {
	t.Helper()
	if got := fileType(st.Mode); got != want {
		t.Fatalf("%s: file type %#o, want %#o", path, got, want)
	}
}

func wantPerm(t *testing.T, path string, st unix.Stat_t, want uint32) {
	t.Helper()
	if got := st.Mode &^ unix.S_IFMT; got != want {
		t.Fatalf("%s: mode %#o, want %#o", path, got, want)
	}
}

func ts(t unix.Timespec) time.Time { return time.Unix(t.Sec, t.Nsec) }

// names lists dir without "." and "..", sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	ok(t, err, "readdir %s", dir)
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = e.Name()
	}
	return out
}

func wantNames(t *testing.T, dir string, want ...string) {
	t.Helper()
	got := names(t, dir)
	if strings.Join(got, "\x00") != strings.Join(want, "\x00") {
		t.Fatalf("entries of %s: got %q, want %q", dir, got, want)
	}
}

func join(dir string, elems ...string) string {
	return filepath.Join(append([]string{dir}, elems...)...)
}
