package store

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// The attack tests: a base owned by uid 65534, who swaps a file or a
// directory of it for a symlink to root's files (RENAME_EXCHANGE, in a
// loop, from a process of its own) while the store, as root, works on the
// base. Root's files live in a temporary directory (never the real /etc):
// a file "secret" (0600) and a directory "etc" (0755, root's). Whatever
// the interleaving, the store's operations refuse (ELOOP, ENOTDIR, ...) or
// stay inside the base: root's files keep their content, mode and owner,
// and nothing of theirs is read into a branch.

const (
	envAttack    = "ARBOR_STORE_ATTACK"     // the pairs to swap: "a:b,c:d"
	envAttackDir = "ARBOR_STORE_ATTACK_DIR" // the base
	nobody       = 65534
	secretData   = "root-only secret"
)

// TestAttackerHelper is not a test: it is the body of the attacker's
// process. For each name=target it gives, it swaps the base's name with a
// symlink to target and back (RENAME_EXCHANGE with name.s), making the
// symlink again whenever the store's own moves took it away, until killed
// (or for a minute at most).
func TestAttackerHelper(t *testing.T) {
	pairs := os.Getenv(envAttack)
	if pairs == "" {
		t.Skip("the attack tests' helper process; runs only under them")
	}
	dir := os.Getenv(envAttackDir)
	type swap struct{ name, alt, target string }
	var ps []swap
	for _, p := range strings.Split(pairs, ",") {
		name, target, _ := strings.Cut(p, "=")
		ps = append(ps, swap{filepath.Join(dir, name), filepath.Join(dir, name+".s"), target})
	}
	isLink := func(p string) bool {
		var st unix.Stat_t
		return unix.Lstat(p, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
	}
	arm := func(p swap) {
		switch {
		case isLink(p.alt):
		case isLink(p.name):
			unix.Renameat2(unix.AT_FDCWD, p.name, unix.AT_FDCWD, p.alt, unix.RENAME_EXCHANGE)
		default:
			os.RemoveAll(p.alt)
			os.Symlink(p.target, p.alt)
		}
	}
	for _, p := range ps {
		arm(p)
		if !isLink(p.alt) {
			fmt.Println("no symlink at", p.alt)
			os.Exit(3)
		}
	}
	fmt.Println("ready")
	for end := time.Now().Add(time.Minute); time.Now().Before(end); {
		for _, p := range ps {
			arm(p)
			unix.Renameat2(unix.AT_FDCWD, p.name, unix.AT_FDCWD, p.alt, unix.RENAME_EXCHANGE)
			unix.Renameat2(unix.AT_FDCWD, p.name, unix.AT_FDCWD, p.alt, unix.RENAME_EXCHANGE)
		}
	}
	os.Exit(0)
}

// hostile is a base owned by nobody beside root's own files.
type hostile struct {
	root, base, secret, etc string
}

func newHostile(t *testing.T) *hostile {
	t.Helper()
	testenv.NeedRoot(t, "to serve a base that another uid owns and swaps")
	top := t.TempDir()
	// nobody reaches its base, and its own copy of the test binary, through it.
	must(t, os.Chmod(filepath.Dir(top), 0o755))
	must(t, os.Chmod(top, 0o755))
	h := &hostile{root: top, base: filepath.Join(top, "base"), secret: filepath.Join(top, "secret"), etc: filepath.Join(top, "etc")}
	must(t, os.WriteFile(h.secret, []byte(secretData), 0o600))
	must(t, os.Mkdir(h.etc, 0o755))
	must(t, os.WriteFile(h.etc+"/x", []byte(secretData), 0o600))
	must(t, os.Mkdir(h.base, 0o755))
	return h
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// give makes the base's content nobody's.
func (h *hostile) give(t *testing.T) {
	t.Helper()
	must(t, filepath.Walk(h.base, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, nobody, nobody)
	}))
}

// attack starts nobody's process swapping the pairs of names, and stops it
// at the end of the test.
func (h *hostile) attack(t *testing.T, pairs string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	bin, err := os.ReadFile(os.Args[0])
	must(t, err)
	self := filepath.Join(h.root, "attacker.test")
	must(t, os.WriteFile(self, bin, 0o755))
	cmd := exec.CommandContext(ctx, self, "-test.run=^TestAttackerHelper$")
	cmd.Env = append(os.Environ(), envAttack+"="+pairs, envAttackDir+"="+h.base)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	buf := make([]byte, 64)
	if n, _ := out.Read(buf); string(buf[:n]) != "ready\n" {
		cancel()
		cmd.Wait()
		t.Fatalf("the attacker did not start: %q", buf[:n])
	}
	t.Cleanup(func() {
		cancel()
		cmd.Wait()
	})
}

// check fails the test if root's files changed.
func (h *hostile) check(t *testing.T) {
	t.Helper()
	for _, p := range []string{h.secret, h.etc + "/x"} {
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		data, err := os.ReadFile(p)
		if err != nil || string(data) != secretData || st.Mode&07777 != 0o600 || st.Uid != 0 || st.Size != int64(len(secretData)) {
			t.Fatalf("root's %s changed: %q mode %o uid %d (%v)", p, data, st.Mode&07777, st.Uid, err)
		}
	}
	ents, _ := os.ReadDir(h.etc)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("root's directory %s holds %v: the store wrote into it", h.etc, names)
	}
	var st unix.Stat_t
	must(t, unix.Lstat(h.etc, &st))
	if st.Mode&07777 != 0o755 || st.Uid != 0 {
		t.Fatalf("root's directory %s: mode %o uid %d", h.etc, st.Mode&07777, st.Uid)
	}
}

// rounds is how many times each attack is tried: enough for the swaps to
// land in every window (each round is a few syscalls of the store's).
const rounds = 3000

// TestAttackFileSwap: a file of the base swapped with a symlink to root's
// secret. A branch's copy-up and open for writing, a truncation, a chmod,
// main's open for writing, and reads from both never reach the secret.
func TestAttackFileSwap(t *testing.T) {
	h := newHostile(t)
	must(t, os.WriteFile(h.base+"/f", []byte("mine"), 0o644))
	h.give(t)
	f := &fixture{t: t, base: h.base, dir: t.TempDir()}
	f.open()
	defer f.s.Close()
	h.attack(t, "f="+h.secret)
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
				f.s.CloseWrite(res.Real)
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
		must(t, f.s.Abort(name))
	}
	h.check(t)
	t.Logf("%d of %d operations refused", refused, rounds*6)
}

// TestAttackDirSwap: a directory of the base exchanged with a symlink to
// root's directory. Main's create, open for writing, chmod, xattr, remove
// and rename under it, a branch's copy-up of a file under it, and a commit
// into main of a change under it never write into root's directory.
func TestAttackDirSwap(t *testing.T) {
	h := newHostile(t)
	must(t, os.Mkdir(h.base+"/d", 0o755))
	must(t, os.WriteFile(h.base+"/d/x", []byte("mine"), 0o600))
	h.give(t)
	f := &fixture{t: t, base: h.base, dir: t.TempDir()}
	f.open()
	defer f.s.Close()
	h.attack(t, "d="+h.etc)
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
			f.s.CloseWrite(res.Real)
			f.s.Chmod(res.Real, 0o666)
			f.s.Chown(res.Real, nobody, nobody)
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
			f.s.CloseWrite(res.Real)
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
			h.check(t)
		}
	}
	h.check(t)
	t.Logf("%d rounds: main created under d %d times; %d commits landed at once, %d were refused a step and finished later", rounds, created, committed, refused)
}
