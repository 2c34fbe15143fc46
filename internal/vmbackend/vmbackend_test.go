package vmbackend

import (
	"context"
	"errors"
	"fmt"
	"syscall"

	"github.com/arbor-dev/arbor/api"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/backendtest"
	"github.com/arbor-dev/arbor/internal/testenv"
	"github.com/arbor-dev/arbor/internal/vm"
)

var (
	agentOnce sync.Once
	agentPath string
	agentErr  error
)

// testConfig is the backend's config for tests: the agent built from this
// tree, images cached under the temp dir.
func testConfig(t *testing.T) Config {
	t.Helper()
	testenv.NeedQEMU(t)
	home := filepath.Join(os.TempDir(), "arbor-vm-test-images")
	agentOnce.Do(func() {
		os.MkdirAll(home, 0o700)
		agentPath = filepath.Join(home, "arbor-guest")
		cmd := exec.Command("go", "build", "-o", agentPath, "github.com/arbor-dev/arbor/cmd/arbor-guest")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentErr = fmt.Errorf("build the agent: %v: %s", err, out)
		}
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return Config{VM: vm.Config{Home: home, Agent: agentPath, Include: vm.PythonInclude()}}
}

func TestConformance(t *testing.T) {
	cfg := testConfig(t)
	backendtest.Run(t, Open(cfg))
}

func run(t *testing.T, b engine.Backend, node, script string) string {
	t.Helper()
	var out []byte
	x, err := b.Exec(t.Context(), node, engine.Command{Argv: []string{"sh", "-c", script}}, func(o api.ExecOutput) error {
		if o.Stream == "stdout" {
			out = append(out, o.Data...)
		}
		return nil
	})
	if err != nil || x.ExitCode != 0 {
		t.Fatalf("%s: %q: %+v %v", node, script, x, err)
	}
	return string(out)
}

func openTest(t *testing.T) (engine.Backend, func(string) string) {
	cfg := testConfig(t)
	dir, files := t.TempDir(), t.TempDir()
	b, err := Open(cfg)(t.Context(), engine.BackendConfig{Tree: "t", Dir: dir, Base: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	path := func(n string) string {
		p := filepath.Join(files, n)
		os.MkdirAll(p, 0o755)
		return p
	}
	return b, path
}

// TestCommitCarriesMemory: a child's commit makes its memory (a tmpfs
// file, a running process) its parent's; a fork batch of 4 gives 4 VMs.
func TestCommitCarriesMemory(t *testing.T) {
	b, path := openTest(t)
	if err := b.Start(t.Context(), "n1", path("n1")); err != nil {
		t.Fatal(err)
	}
	run(t, b, "n1", "echo parent > /tmp/state")
	kids := []string{"n2", "n3", "n4", "n5"}
	if err := b.Fork(t.Context(), "n1", kids, func(context.Context) ([]string, error) {
		var ps []string
		for _, k := range kids {
			ps = append(ps, path(k))
		}
		return ps, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		if got := run(t, b, k, "cat /tmp/state; hostname"); got != "parent\n"+k+"\n" {
			t.Fatalf("%s: %q", k, got)
		}
	}
	run(t, b, "n3", "echo child-n3 > /tmp/state")
	if err := b.Suspend(t.Context(), "n3"); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(t.Context(), "n3", "n1"); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(t.Context(), "n3"); err != nil {
		t.Fatal(err)
	}
	if got := run(t, b, "n1", "cat /tmp/state"); got != "child-n3\n" {
		t.Fatalf("the parent after the commit reads %q, want the child's state", got)
	}
	if got := run(t, b, "n2", "cat /tmp/state"); got != "parent\n" {
		t.Fatalf("a sibling reads %q after the commit", got)
	}
}

// TestKillMidFork: the source's QEMU killed inside the fork (its files
// step) fails the fork; no child is held, the source is held suspended at
// its last saved state and resumes.
func TestKillMidFork(t *testing.T) {
	b, path := openTest(t)
	if err := b.Start(t.Context(), "n1", path("n1")); err != nil {
		t.Fatal(err)
	}
	v, _ := b.(*backend).get("n1")
	err := b.Fork(t.Context(), "n1", []string{"n2"}, func(context.Context) ([]string, error) {
		syscall.Kill(v.Pid(), syscall.SIGKILL)
		return []string{path("n2")}, nil
	})
	if !errors.Is(err, vm.ErrQEMUExited) {
		t.Fatalf("fork with its source killed: %v", err)
	}
	ns, _ := b.Nodes(t.Context())
	if len(ns) != 1 || ns[0].ID != "n1" || ns[0].State != engine.HeldSuspended {
		t.Fatalf("held after the failed fork: %+v, want n1 suspended", ns)
	}
	if err := b.Resume(t.Context(), "n1", path("n1")); err != nil {
		t.Fatal(err)
	}
	if got := run(t, b, "n1", "echo ok"); got != "ok\n" {
		t.Fatalf("resumed source: %q", got)
	}
}
