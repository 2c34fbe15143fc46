package cli

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestNonRootMountUnavailable: a daemon that is not root mounts through
// fusermount3; when that fails (here a stand-in that says what fusermount3
// says on a host whose /dev/fuse is 0600 root), the user sees fusermount3's
// own words, the code unavailable, and the hint to run arbor doctor, for
// arbor mount and for a tree (the demo's path) alike. Before, the message
// was "fusermount exited with code 256" and the cause only in arbord.log.
func TestNonRootMountUnavailable(t *testing.T) {
	testenv.NeedRoot(t, "runs arbor as uid 65534")
	const nobody = 65534
	dir, err := os.MkdirTemp("", "arbor-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	for _, d := range []string{"bin", "base", "home"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// This test binary is arbor when it is called so (testscript.Main).
	self, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.OpenFile(filepath.Join(dir, "bin", "arbor"), os.O_WRONLY|os.O_CREATE, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(exe, self)
	self.Close()
	if cerr := exe.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	const why = "fusermount3: failed to open /dev/fuse: Permission denied"
	if err := os.WriteFile(filepath.Join(dir, "bin", "fusermount3"), []byte("#!/bin/sh\necho '"+why+"' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, nobody, nobody)
	}); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	home := filepath.Join(dir, "home")
	t.Cleanup(func() {
		arbor(t, dir, "daemon", "stop")
		for _, pid := range daemonPIDs(home) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	for _, args := range [][]string{
		{"mount", "--base", filepath.Join(dir, "base"), filepath.Join(dir, "ws")},
		{"tree", "create", "--base", filepath.Join(dir, "base")},
	} {
		code, stderr := arbor(t, dir, args...)
		name := "arbor " + strings.Join(args[:2], " ")
		if code != 1 {
			t.Errorf("%s as uid %d: exit %d, want 1; stderr %q", name, nobody, code, stderr)
		}
		for _, want := range []string{why, "unavailable", "arbor doctor"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("%s as uid %d: stderr %q lacks %q", name, nobody, stderr, want)
			}
		}
	}
}

// arbor runs dir/bin/arbor as uid 65534 with dir's home and stand-ins on
// PATH; it returns the exit code and stderr.
func arbor(t *testing.T, dir string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "bin", "arbor"), args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + filepath.Join(dir, "bin") + ":/usr/bin:/bin", "HOME=" + dir, "ARBOR_HOME=" + filepath.Join(dir, "home")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), stderr.String()
	}
	if err != nil {
		t.Fatalf("arbor %v: %v", args, err)
	}
	return 0, stderr.String()
}
