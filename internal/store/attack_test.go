package store

import (
	"fmt"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/internal/store/attacktest"
	"golang.org/x/sys/unix"
)

// The attack tests: a base owned by uid 65534, who swaps a file or a
// directory of it for a symlink to root's secret or root's directory
// (RENAME_EXCHANGE, in a loop, from a process of its own: attacktest)
// while the store, as root, works on the base. Whatever the interleaving,
// the store's operations refuse (ELOOP, ENOTDIR, ...) or stay inside the
// base: root's files keep their content, mode and owner, and nothing of
// theirs is read into a branch.

// TestAttackerHelper is not a test: it is the attacker's process
// (attacktest.Helper).
func TestAttackerHelper(t *testing.T) { attacktest.Helper(t) }

// attacked opens a store over a hostile base holding files and starts the
// attacker's swaps on it.
func attacked(t *testing.T, files map[string]string, swaps func(*attacktest.Hostile) string) (*attacktest.Hostile, *fixture) {
	h := attacktest.New(t)
	h.Put(t, files)
	f := &fixture{t: t, base: h.Base, dir: t.TempDir()}
	f.open()
	t.Cleanup(func() { f.s.Close() })
	h.Attack(t, "TestAttackerHelper", swaps(h))
	return h, f
}

// rounds is how many times each attack is tried: enough for the swaps to
// land in every window (each round is a few syscalls of the store's).
const rounds = 3000

// TestAttackFileSwap: a file of the base swapped with a symlink to root's
// secret. A branch's copy-up and open for writing, a truncation, a chmod,
// main's open for writing, and reads from both never reach the secret.
func TestAttackFileSwap(t *testing.T) {
	h, f := attacked(t, map[string]string{"f": "mine"}, func(h *attacktest.Hostile) string { return "f=" + h.Secret })
	m := f.br(Main)
	refused := 0
	for i := range rounds {
		name := fmt.Sprintf("b%d", i)
		f.fork(Main, name)
		b := f.br(name)
		for _, br := range []*Branch{b, m} {
			fd, res, err := f.s.OpenFile(br, "f", unix.O_RDWR, 0, false)
			if err != nil {
				refused++
			} else {
				buf := make([]byte, 64)
				n, _ := unix.Pread(fd, buf, 0)
				if strings.Contains(string(buf[:max(n, 0)]), "secret") {
					t.Fatalf("%s: the secret read through a writer's copy: %q", br.Name, buf[:n])
				}
				unix.Pwrite(fd, []byte("pwned"), 0)
				unix.Close(fd)
				f.s.CloseWrite(res.Writer)
				if err := f.s.Chmod(res.Real, 0o777); err != nil {
					refused++
				}
				if err := f.s.Truncate(res.Real, 1); err != nil {
					refused++
				}
			}
			var st unix.Stat_t
			if fd, _, err := f.s.OpenRead(br, "f", unix.O_RDONLY, &st); err == nil {
				buf := make([]byte, 64)
				n, _ := unix.Pread(fd, buf, 0)
				unix.Close(fd)
				if strings.Contains(string(buf[:max(n, 0)]), "secret") {
					t.Fatalf("%s: the secret read: %q", br.Name, buf[:n])
				}
			}
		}
		if err := f.s.Abort(name); err != nil {
			t.Fatal(err)
		}
	}
	h.Check(t)
	t.Logf("%d of %d operations refused", refused, rounds*6)
}

// TestAttackDirSwap: a directory of the base exchanged with a symlink to
// root's directory. Main's create, open for writing, chmod, xattr, remove
// and rename under it, a branch's copy-up of a file under it, and a commit
// into main of a change under it never write into root's directory.
func TestAttackDirSwap(t *testing.T) {
	h, f := attacked(t, map[string]string{"d/x": "mine"}, func(h *attacktest.Hostile) string { return "d=" + h.Etc })
	m := f.br(Main)
	mk := func(dir int, name string) error {
		fd, err := unix.Openat(dir, name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}
	var created, committed, refused int
	for i := range rounds {
		if f.s.Create(m, "d/new", false, mk) == nil {
			created++
		}
		f.s.Remove(m, "d/new", false)
		if fd, res, err := f.s.OpenFile(m, "d/x", unix.O_WRONLY|unix.O_TRUNC, 0, false); err == nil {
			unix.Pwrite(fd, []byte("pwned-by-main"), 0)
			unix.Close(fd)
			f.s.CloseWrite(res.Writer)
			f.s.Chmod(res.Real, 0o666)
			f.s.Chown(res.Real, attacktest.Nobody, attacktest.Nobody)
			f.s.Setxattr(res.Real, "trusted.arbor-attack", []byte("1"), 0)
			f.s.Utimes(res.Real, []unix.Timespec{{Sec: 1}, {Sec: 1}})
		}
		f.s.Rename(m, "d/x", "d/y", 0)
		f.s.Rename(m, "d/y", "d/x", 0)
		// A branch: a copy-up under d (its parent copied up too), then a
		// commit into main of what it wrote.
		name := fmt.Sprintf("c%d", i)
		f.fork(Main, name)
		c := f.br(name)
		if fd, res, err := f.s.OpenFile(c, "d/x", unix.O_WRONLY|unix.O_TRUNC, 0, false); err == nil {
			unix.Pwrite(fd, []byte("from-branch"), 0)
			unix.Close(fd)
			f.s.CloseWrite(res.Writer)
		}
		f.s.Create(c, "d/made", false, mk)
		if _, err := f.s.Commit(name, false); err != nil {
			refused++
			// A refused step leaves the commit to finish: it is finished
			// once the attack lets it (see TestCommitApplyFails).
			for err != nil {
				_, err = f.s.Commit(name, false)
			}
		} else {
			committed++
		}
		f.s.Remove(m, "d/made", false)
		if i%500 == 0 {
			h.Check(t)
		}
	}
	h.Check(t)
	t.Logf("%d rounds: main created under d %d times; %d commits landed at once, %d were refused a step and finished later", rounds, created, committed, refused)
}
