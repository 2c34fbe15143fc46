package cowfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/arbor-dev/arbor/internal/store"
	"golang.org/x/sys/unix"
)

// TestCopyUpDirAttrsFresh: a copy-up makes an entry in the head's copy of
// a directory (a file written below it, or one of its subdirectories
// copied up for a file written deeper), which changes that real
// directory's ctime (and mtime) although no request on the directory
// itself said so. The kernel must not keep the attributes it had: a stat
// served from its cache and an fstat after a listing (which refreshes
// them) would disagree, and GNU tar, which compares them, says "file
// changed as we read it" of a directory nothing writes.
func TestCopyUpDirAttrsFresh(t *testing.T) {
	tar, err := exec.LookPath("tar")
	if err != nil {
		t.Fatalf("GNU tar (Debian's base has it): %v", err)
	}
	f, _, mnt := mount(t, func(b string) {
		os.MkdirAll(filepath.Join(b, "ws/mathy/__pycache__"), 0o755)
		os.MkdirAll(filepath.Join(b, "ws/tests"), 0o755)
		os.WriteFile(filepath.Join(b, "ws/mathy/__init__.py"), []byte("def add(a, b): return a - b\n"), 0o644)
		os.WriteFile(filepath.Join(b, "ws/mathy/__pycache__/old.pyc"), []byte("pyc"), 0o644)
		os.WriteFile(filepath.Join(b, "ws/tests/t.py"), []byte("test"), 0o644)
	})
	dirs := []string{"ws", "ws/mathy", "ws/mathy/__pycache__", "ws/tests"}
	for i, write := range []func(view string) error{
		// A new file two levels below ws/mathy: ws, ws/mathy and
		// __pycache__ are copied up, the kernel is told of __pycache__ only.
		func(view string) error {
			return os.WriteFile(filepath.Join(view, "ws/mathy/__pycache__/new.pyc"), []byte("new"), 0o644)
		},
		// An existing file opened for writing: copied up into the head's
		// ws/mathy; the kernel is told of no directory.
		func(view string) error {
			fd, err := os.OpenFile(filepath.Join(view, "ws/tests/t.py"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			_, err = fd.WriteString("more\n")
			if cerr := fd.Close(); err == nil {
				err = cerr
			}
			return err
		},
		// A lower file's mode changed: a metadata-only copy of it made in
		// the head's ws/mathy.
		func(view string) error {
			return os.Chmod(filepath.Join(view, "ws/mathy/__init__.py"), 0o600)
		},
	} {
		for j, useTar := range []bool{false, true} {
			name := string(rune('b' + 2*i + j))
			if err := f.Store().Fork(store.Main, name); err != nil {
				t.Fatal(err)
			}
			view := filepath.Join(mnt, "@"+name)
			// The kernel learns every directory as the fork shows it.
			for _, d := range dirs {
				var st unix.Stat_t
				if err := unix.Lstat(filepath.Join(view, d), &st); err != nil {
					t.Fatal(err)
				}
			}
			if err := write(view); err != nil {
				t.Fatalf("%s: write: %v", name, err)
			}
			if useTar {
				if out, err := exec.Command(tar, "-C", filepath.Join(view, "ws"), "-cf", "/dev/null", ".").CombinedOutput(); err != nil {
					t.Errorf("%s: tar: %v: %s", name, err, out)
				}
				continue
			}
			// As tar reads a directory: lstat, open, list, fstat.
			for _, d := range dirs {
				p := filepath.Join(view, d)
				var before, after unix.Stat_t
				if err := unix.Lstat(p, &before); err != nil {
					t.Fatal(err)
				}
				fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY, 0)
				if err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 1<<16)
				for {
					n, err := unix.Getdents(fd, buf)
					if err != nil {
						t.Fatal(err)
					}
					if n == 0 {
						break
					}
				}
				err = unix.Fstat(fd, &after)
				unix.Close(fd)
				if err != nil {
					t.Fatal(err)
				}
				if before.Ctim != after.Ctim || before.Mtim != after.Mtim || before.Size != after.Size || before.Ino != after.Ino {
					t.Errorf("%s: %s: lstat then fstat after listing disagree: ctime %v %v, mtime %v %v, size %d %d, ino %d %d",
						name, d, before.Ctim, after.Ctim, before.Mtim, after.Mtim, before.Size, after.Size, before.Ino, after.Ino)
				}
			}
		}
	}
}
