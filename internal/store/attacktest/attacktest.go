// Package attacktest is the hostile user of the store's and cowfs's attack
// tests: a base owned by uid 65534, beside root's own files in a temporary
// directory (never the real /etc), and a process of that uid that swaps the
// base's names for symlinks to root's files while the daemon's code works
// on the base.
//
// A test package that uses it has a test that calls Helper first thing:
// the attacker's process is that test binary, re-run as uid 65534.
package attacktest

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

const (
	envSwaps = "ARBOR_ATTACK_SWAPS" // name=target,...
	envBase  = "ARBOR_ATTACK_BASE"
	// Nobody is the attacker's uid and gid.
	Nobody = 65534
	// Secret is the content of root's files.
	Secret = "root-only secret"
)

// Helper is the body of the attacker's process when the test binary runs as
// one (it never returns then); in a normal run it skips its test. For each
// name=target, it swaps the base's name with a symlink to target and back
// (RENAME_EXCHANGE with name.s), making the symlink again whenever the code
// under attack moved it away, until killed (or for a minute at most).
func Helper(t *testing.T) {
	swaps := os.Getenv(envSwaps)
	if swaps == "" {
		t.Skip("the attack tests' helper process; runs only under them")
	}
	base := os.Getenv(envBase)
	type swap struct{ name, alt, target string }
	var ps []swap
	for _, p := range strings.Split(swaps, ",") {
		name, target, _ := strings.Cut(p, "=")
		ps = append(ps, swap{filepath.Join(base, name), filepath.Join(base, name+".s"), target})
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

// Hostile is a base owned by nobody beside root's files: Secret (0600)
// and Etc, a directory of root's (0755) holding Etc/x (0600).
type Hostile struct {
	Root, Base, Secret, Etc string
}

// New makes the directories; the base is empty until Give.
func New(t *testing.T) *Hostile {
	t.Helper()
	testenv.NeedRoot(t, "to serve a base that another uid owns and swaps")
	top := t.TempDir()
	// nobody reaches its base, and its own copy of the test binary, through it.
	must(t, os.Chmod(filepath.Dir(top), 0o755))
	must(t, os.Chmod(top, 0o755))
	h := &Hostile{Root: top, Base: filepath.Join(top, "base"), Secret: filepath.Join(top, "secret"), Etc: filepath.Join(top, "etc")}
	must(t, os.WriteFile(h.Secret, []byte(Secret), 0o600))
	must(t, os.Mkdir(h.Etc, 0o755))
	must(t, os.WriteFile(h.Etc+"/x", []byte(Secret), 0o600))
	must(t, os.Mkdir(h.Base, 0o755))
	return h
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Put makes the base's files (a name ending in "/" is a directory) and
// gives them to nobody.
func (h *Hostile) Put(t *testing.T, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(h.Base, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		if strings.HasSuffix(name, "/") {
			must(t, os.MkdirAll(p, 0o755))
			continue
		}
		must(t, os.WriteFile(p, []byte(data), 0o644))
	}
	h.Give(t)
}

// Give makes everything in the base nobody's.
func (h *Hostile) Give(t *testing.T) {
	t.Helper()
	must(t, filepath.Walk(h.Base, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, Nobody, Nobody)
	}))
}

// Attack starts nobody's process swapping each name=target of swaps (names
// in the base) and stops it at the end of the test. run is the -test.run
// pattern of the package's test that calls Helper.
func (h *Hostile) Attack(t *testing.T, run, swaps string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	bin, err := os.ReadFile(os.Args[0])
	must(t, err)
	self := filepath.Join(h.Root, "attacker.test")
	must(t, os.WriteFile(self, bin, 0o755))
	cmd := exec.CommandContext(ctx, self, "-test.run=^"+run+"$")
	cmd.Env = append(os.Environ(), envSwaps+"="+swaps, envBase+"="+h.Base)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: Nobody, Gid: Nobody}}
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

// Check fails the test if root's files changed: content, mode, owner, and
// the entries of root's directory.
func (h *Hostile) Check(t *testing.T) {
	t.Helper()
	for _, p := range []string{h.Secret, h.Etc + "/x"} {
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		data, err := os.ReadFile(p)
		if err != nil || string(data) != Secret || st.Mode&07777 != 0o600 || st.Uid != 0 || st.Size != int64(len(Secret)) {
			t.Fatalf("root's %s changed: %q mode %o uid %d (%v)", p, data, st.Mode&07777, st.Uid, err)
		}
	}
	ents, _ := os.ReadDir(h.Etc)
	if len(ents) != 1 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("root's directory %s holds %v: written into", h.Etc, names)
	}
	var st unix.Stat_t
	must(t, unix.Lstat(h.Etc, &st))
	if st.Mode&07777 != 0o755 || st.Uid != 0 {
		t.Fatalf("root's directory %s: mode %o uid %d", h.Etc, st.Mode&07777, st.Uid)
	}
}
