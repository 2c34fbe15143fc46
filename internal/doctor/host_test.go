package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The capabilities arbor doctor must report on (issue 9), in the words of
// its Names: a check that disappears fails here.
var required = []string{
	"kernel", "root", "dev_fuse", "fusermount3", "fuse_passthrough", "fusectl", "fuse_io_uring",
	"cgroup", "ns_user", "ns_pid", "ns_net", "ns_mount", "landlock", "seccomp", "kvm", "qemu",
	"reflink", "open_files",
}

// On this machine, every capability gets a line with a verdict, and the
// probes leave nothing behind in ARBOR_HOME.
func TestSystemHost(t *testing.T) {
	home := t.TempDir()
	r := Run(context.Background(), SystemHost(home))
	got := names(r)
	for _, n := range required {
		if !slices.Contains(got, n) {
			t.Errorf("no line for %s", n)
		}
	}
	for _, c := range r.Checks {
		if c.Detail == "" || (c.Status != OK && c.Status != Warn && c.Status != Missing) {
			t.Errorf("%s: status %q, detail %q", c.Name, c.Status, c.Detail)
		}
		t.Logf("%-7s %-16s %s", c.Status, c.Name, c.Detail)
	}
	if ents, err := os.ReadDir(home); err != nil || len(ents) != 0 {
		t.Errorf("ARBOR_HOME after the checks: %v, %v", ents, err)
	}
	// What this process can see for itself must agree with the report.
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	if c := find(r, "kernel"); !strings.Contains(c.Detail, strings.TrimSpace(string(kernel))) {
		t.Errorf("kernel: %q does not name %q", c.Detail, kernel)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		if c := find(r, "dev_fuse"); c.Status != Missing || r.Runs {
			t.Errorf("no /dev/fuse here, but dev_fuse is %s and runs is %v", c.Status, r.Runs)
		}
	}
	if os.Geteuid() == 0 {
		if c := find(r, "root"); c.Status == Missing {
			t.Errorf("root: %s", c.Detail)
		}
	}
}

func find(r Report, name string) Check {
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	return Check{}
}

func TestDoctorMain(t *testing.T) {
	ctx := context.Background()
	home := filepath.Join(t.TempDir(), "home") // not made: doctor must not make it
	var out, errb bytes.Buffer
	code := Main(ctx, []string{"-o", "json"}, home, &out, &errb)
	var r Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("-o json: %v\n%s", err, out.String())
	}
	if want := map[bool]int{true: 0, false: 1}[r.Runs]; code != want {
		t.Errorf("exit %d with default_backend_runs %v", code, r.Runs)
	}
	if len(r.Checks) != len(Names()) || errb.Len() != 0 {
		t.Errorf("%d checks, stderr %q", len(r.Checks), errb.String())
	}
	if _, err := os.Stat(home); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("doctor made ARBOR_HOME: %v", err)
	}

	out.Reset()
	if code := Main(ctx, nil, home, &out, &errb); code > 1 || strings.Count(out.String(), "\n") != len(Names())+1 {
		t.Errorf("text: exit %d\n%s", code, out.String())
	}

	for _, args := range [][]string{{"-o", "yaml"}, {"extra"}, {"--nope"}} {
		out.Reset()
		errb.Reset()
		if code := Main(ctx, args, home, &out, &errb); code != 2 || out.Len() != 0 || !strings.Contains(errb.String(), "usage: arbor doctor") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out.String(), errb.String())
		}
	}
	out.Reset()
	if code := Main(ctx, []string{"-h"}, home, &out, &errb); code != 0 || !strings.Contains(out.String(), "usage: arbor doctor") {
		t.Errorf("-h: exit %d, %q", code, out.String())
	}
}

func TestCloneProbe(t *testing.T) {
	if err := cloneProbe(0); err != nil {
		t.Errorf("a plain fork: %v", err)
	}
	// The kernel refuses a new mount namespace that shares its filesystem
	// information: the probe must report clone's error, not success.
	if err := cloneProbe(unix.CLONE_NEWNS | unix.CLONE_FS); !errors.Is(err, unix.EINVAL) {
		t.Errorf("CLONE_NEWNS|CLONE_FS: %v, want EINVAL", err)
	}
	if os.Geteuid() == 0 {
		if err := cloneProbe(unix.CLONE_NEWNS | unix.CLONE_NEWPID | unix.CLONE_NEWNET); err != nil {
			t.Errorf("as root: %v", err)
		}
	}
}

func TestOpenDevice(t *testing.T) {
	if err := openDevice("/dev/null"); err != nil {
		t.Error(err)
	}
	if err := openDevice(filepath.Join(t.TempDir(), "none")); !errors.Is(err, unix.ENOENT) {
		t.Errorf("a missing device: %v", err)
	}
}

func TestReflinkProbe(t *testing.T) {
	d := t.TempDir()
	err := reflink(d)
	if err != nil && !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.ENOTTY) {
		t.Errorf("reflink in %s: %v", d, err)
	}
	t.Logf("reflink in %s: %v", d, err)
	if ents, _ := os.ReadDir(d); len(ents) != 0 {
		t.Errorf("left %v", ents)
	}
	if err := reflink(filepath.Join(d, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("in a missing directory: %v", err)
	}
}

func TestLandlockProbe(t *testing.T) {
	abi, err := landlockABI()
	if err == nil && abi < 1 || err != nil && !errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EOPNOTSUPP) {
		t.Errorf("ABI %d, %v", abi, err)
	}
}

func TestCommandVersion(t *testing.T) {
	d := t.TempDir()
	write := func(name, script string) string {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ctx := context.Background()
	if v, err := commandVersion(ctx, write("q", `[ "$1" = --version ] && printf 'QEMU emulator version 9.9.9\nCopyright\n'`)); err != nil || v != "QEMU emulator version 9.9.9" {
		t.Errorf("got %q, %v", v, err)
	}
	if _, err := commandVersion(ctx, write("silent", "exit 0\n")); err == nil {
		t.Error("a silent program has a version")
	}
	if _, err := commandVersion(ctx, write("fails", "exit 3\n")); err == nil {
		t.Error("a failing program has a version")
	}
}
