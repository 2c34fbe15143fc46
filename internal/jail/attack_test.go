package jail_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// TestAttackSetidFiles: root inside a sandbox may not give a file of
// /workspace (or /tmp) a setuid or setgid bit or a file capability, by
// any path (chmod, fchmod, fchmodat, open/creat/mknod with the mode, cp -p
// of a setuid host program, io_uring's opens, openat2): such a file
// reaches the tree's base at a commit, where any host user could run it.
// Other modes and files still work.
func TestAttackSetidFiles(t *testing.T) {
	m := newManager(t)
	s, ws, tmp := start(t, m, "setid")
	for _, c := range []string{
		"cp /bin/true /workspace/a && chmod 4755 /workspace/a",
		"cp /bin/true /workspace/b && chmod u+s /workspace/b",
		"cp /bin/true /workspace/c && chmod g+s /workspace/c",
		"cp /bin/true /tmp/d && chmod 6755 /tmp/d",
		"install -m 4755 /bin/true /workspace/e",
		"mkdir /workspace/g && chmod 2775 /workspace/g",
	} {
		if out, errs, st := sh(t, s, c); st.Code == 0 {
			t.Errorf("%q succeeded: %q %q", c, out, errs)
		}
	}
	if _, err := os.Stat("/usr/bin/passwd"); err == nil {
		sh(t, s, "cp -p /usr/bin/passwd /workspace/passwd")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		testenv.Missing(t, testenv.Python, "the raw syscall checks need python3")
	}
	const py = `
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def call(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(nr, *args)
    print(name, r, ctypes.get_errno())
call("open", 2, b"/workspace/o1", os.O_CREAT | os.O_WRONLY, 0o4755)
call("openat", 257, -100, b"/workspace/o2", os.O_CREAT | os.O_WRONLY, 0o2755)
call("creat", 85, b"/workspace/o3", 0o4755)
call("mknod", 133, b"/workspace/o4", 0o100000 | 0o4755, 0)
call("mknodat", 259, -100, b"/workspace/o5", 0o100000 | 0o6755, 0)
call("fchmodat", 268, -100, b"/workspace/plain", 0o4755)
fd = os.open("/workspace/plain", os.O_RDONLY)
call("fchmod", 91, fd, 0o4755)
call("io_uring_setup", 425, 8, ctypes.create_string_buffer(120))
call("openat2", 437, -100, b"/workspace/o6", ctypes.create_string_buffer(24), 24)
try:
    os.setxattr("/workspace/plain", "security.capability", b"\x01\x00\x00\x02" + b"\x00" * 16)
    print("setcap 0 0")
except OSError as e:
    print("setcap -1", e.errno)
`
	if err := os.WriteFile(filepath.Join(ws, "plain"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, st := sh(t, s, "python3 -c '"+py+"'")
	if st.Code != 0 {
		t.Fatalf("python: %v %s %s", st, out, errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 10 {
		t.Fatalf("python output: %s", out)
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) != 3 || f[1] != "-1" || f[2] != "1" {
			t.Errorf("%s: want -1 EPERM (1)", l)
		}
	}
	// Ordinary modes still work.
	if out, errs, st := sh(t, s, "cp /bin/true /workspace/ok && chmod 755 /workspace/ok && /workspace/ok && mkdir -m 700 /tmp/dir && touch /tmp/dir/f"); st.Code != 0 {
		t.Errorf("ordinary modes: %q %q %v", out, errs, st)
	}
	for _, dir := range []string{ws, tmp} {
		filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
				t.Errorf("%s: %v", p, fi.Mode())
			}
			if err == nil {
				if n, _ := getxattr(p, "security.capability"); n > 0 {
					t.Errorf("%s has a file capability", p)
				}
			}
			return nil
		})
	}
}

func getxattr(path, name string) (int, error) {
	return unix.Lgetxattr(path, name, nil)
}

// TestAttackHostSecrets: a sandbox on the host's root reads the host's
// /etc, as uid 0: the password hashes, SSH host keys and TLS private keys
// there read empty (an image's /etc is its own).
func TestAttackHostSecrets(t *testing.T) {
	m := newManager(t)
	s, _, _ := start(t, m, "secrets")
	for _, c := range []string{
		"cat /etc/shadow /etc/gshadow 2>/dev/null",
		"cat /etc/ssh/ssh_host_*_key 2>/dev/null",
		"ls -A /etc/ssl/private 2>/dev/null",
	} {
		if out, _, _ := sh(t, s, c); out != "" {
			t.Errorf("%q in the sandbox: %.60q", c, out)
		}
	}
	if _, err := os.Stat("/etc/shadow"); err == nil {
		if out, _, st := sh(t, s, "test -f /etc/shadow && test ! -s /etc/shadow && head -1 /etc/passwd"); st.Code != 0 || !strings.HasPrefix(out, "root:") {
			t.Errorf("/etc/shadow should be there, empty, and /etc/passwd readable: %q %v", out, st)
		}
	}
}
