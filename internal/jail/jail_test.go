package jail_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/jail"
	"github.com/arbor-dev/arbor/internal/testenv"
)

func TestMain(m *testing.M) {
	jail.Main() // a sandbox's init is a re-exec of this binary
	if helperMain() {
		return
	}
	os.Exit(m.Run())
}

var nonName = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// newManager returns a manager under a label of this test's own, closed
// (and its cgroups checked gone) at the end.
func newManager(t testing.TB) *jail.Manager {
	t.Helper()
	return newManagerSpares(t, 0)
}

// newManagerSpares is newManager with Config.Spares.
func newManagerSpares(t testing.TB, spares int) *jail.Manager {
	t.Helper()
	testenv.NeedRoot(t, "sandboxes need namespaces and cgroups")
	label := fmt.Sprintf("t%d-%s", os.Getpid(), nonName.ReplaceAllString(t.Name(), "_"))
	if len(label) > 64 {
		label = label[:64]
	}
	m, err := jail.New(jail.Config{StateDir: t.TempDir(), Label: label, Spares: spares})
	if errors.Is(err, api.ErrUnavailable) {
		testenv.Missing(t, testenv.Cgroup, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
		for _, d := range cgroupDirs(label) {
			if _, err := os.Stat(d); err == nil {
				t.Errorf("cgroup %s left behind", d)
			}
		}
	})
	return m
}

// cgroupDirs are the directories a label's cgroups would be in.
func cgroupDirs(label string) []string {
	var out []string
	b, _ := os.ReadFile("/proc/self/cgroup")
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch f[1] {
		case "":
			for _, mnt := range []string{"/sys/fs/cgroup/unified", "/sys/fs/cgroup"} {
				if _, err := os.Stat(mnt + "/cgroup.controllers"); err == nil {
					out = append(out, filepath.Join(mnt, f[2], "arbor-jail", label))
					break
				}
			}
		case "memory", "pids", "freezer":
			out = append(out, filepath.Join("/sys/fs/cgroup", f[1], f[2], "arbor-jail", label))
		}
	}
	return out
}

// start starts a sandbox over fresh workspace and tmp directories.
func start(t testing.TB, m *jail.Manager, name string) (*jail.Sandbox, string, string) {
	t.Helper()
	ws, tmp := t.TempDir(), t.TempDir()
	s, err := m.Start(context.Background(), jail.Spec{Name: name, Workspace: ws, Tmp: tmp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("stop %s: %v", name, err)
		}
	})
	return s, ws, tmp
}

// sh runs a shell script in s and returns its output and status.
func sh(t testing.TB, s *jail.Sandbox, script string) (string, string, jail.ExitStatus) {
	t.Helper()
	var out, errb bytes.Buffer
	st, err := s.Exec(context.Background(), jail.ExecSpec{Argv: []string{"/bin/sh", "-c", script}, Stdout: &out, Stderr: &errb, Timeout: 30 * time.Second})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return out.String(), errb.String(), st
}

func TestExecBasics(t *testing.T) {
	m := newManager(t)
	s, ws, _ := start(t, m, "basics")
	if err := os.WriteFile(filepath.Join(ws, "hello"), []byte("from host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errs, st := sh(t, s, `cat /workspace/hello; echo err >&2; pwd; hostname; exit 3`)
	if out != "from host\n/workspace\nbasics\n" || errs != "err\n" || st.Code != 3 || st.Signal != 0 {
		t.Fatalf("out %q err %q status %v", out, errs, st)
	}
	out, _, _ = sh(t, s, `echo $$; cat /proc/1/comm 2>&1 | head -c 0; ls /proc | grep -E '^[0-9]+$' | sort -n | head -1`)
	if !strings.HasSuffix(out, "1\n") {
		t.Errorf("pid namespace: %q", out)
	}
	// Stdin, env and cwd.
	var o bytes.Buffer
	st, err := s.Exec(context.Background(), jail.ExecSpec{
		Argv: []string{"sh", "-c", "read x; echo $x $FOO; pwd"}, Env: []string{"PATH=/usr/bin:/bin", "FOO=bar"},
		Cwd: "/tmp", Stdin: strings.NewReader("line\n"), Stdout: &o,
	})
	if err != nil || st.Code != 0 || o.String() != "line bar\n/tmp\n" {
		t.Fatalf("stdin/env/cwd: %v %v %q", st, err, o.String())
	}
	// Not found.
	if _, err := s.Exec(context.Background(), jail.ExecSpec{Argv: []string{"no-such-command"}}); err == nil {
		t.Error("exec of a missing command succeeded")
	}
	// Bad input.
	if _, err := s.Exec(context.Background(), jail.ExecSpec{}); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("empty argv: %v", err)
	}
}
