package jailbackend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/backendtest"
	"github.com/arbor-dev/arbor/internal/jail"
	"github.com/arbor-dev/arbor/internal/testenv"
)

func TestMain(m *testing.M) {
	jail.Main() // a sandbox's init is a re-exec of this binary
	os.Exit(m.Run())
}

// need skips (or fails, under ARBOR_TEST_REQUIRE) where sandboxes cannot run.
func need(t *testing.T) {
	t.Helper()
	testenv.NeedRoot(t, "sandboxes need namespaces and cgroups")
	if err := Available(); err != nil {
		testenv.Missing(t, testenv.Cgroup, "no sandboxes here: "+err.Error())
	}
}

// TestConformance: the engine's backend suite against the jail backend.
func TestConformance(t *testing.T) {
	need(t)
	backendtest.Run(t, Open(Config{}))
}

type fixture struct {
	t   *testing.T
	ctx context.Context
	cfg engine.BackendConfig
	b   engine.Backend
}

func newFixture(t *testing.T) *fixture {
	need(t)
	f := &fixture{t: t, ctx: t.Context(), cfg: engine.BackendConfig{Tree: "t1", Dir: t.TempDir(), Base: t.TempDir()}}
	f.reopen()
	t.Cleanup(func() { f.b.Close() })
	return f
}

func (f *fixture) reopen() {
	f.t.Helper()
	if f.b != nil {
		if err := f.b.Close(); err != nil {
			f.t.Fatal(err)
		}
	}
	b, err := Open(Config{})(f.ctx, f.cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.b = b
}

func (f *fixture) files(node, name, data string) string {
	f.t.Helper()
	p := filepath.Join(f.cfg.Base, "files-"+node)
	if err := os.MkdirAll(p, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if name != "" {
		if err := os.WriteFile(filepath.Join(p, name), []byte(data), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
	return p
}

// sh runs script in node and returns its stdout; it must exit 0.
func (f *fixture) sh(node, script string) string {
	f.t.Helper()
	var out, errs strings.Builder
	x, err := f.b.Exec(f.ctx, node, engine.Command{Argv: []string{"sh", "-c", script}}, func(c api.ExecOutput) error {
		if c.Stream == "stdout" {
			out.Write(c.Data)
		} else {
			errs.Write(c.Data)
		}
		return nil
	})
	if err != nil || x.ExitCode != 0 {
		f.t.Fatalf("%s: %q: %+v %v (stderr %q)", node, script, x, err, errs.String())
	}
	return out.String()
}

// TestWorkspaceAndTmp: a node sees its files at /workspace and a /tmp of
// its own, which suspend and resume keep, a sibling does not see, a reopen
// keeps (the node held suspended) and stop removes.
func TestWorkspaceAndTmp(t *testing.T) {
	f := newFixture(t)
	p1 := f.files("n1", "f", "one\n")
	if err := f.b.Start(f.ctx, "n1", p1); err != nil {
		t.Fatal(err)
	}
	if got := f.sh("n1", "cat /workspace/f; echo kept > /tmp/t; echo made > /workspace/g"); got != "one\n" {
		t.Fatalf("n1 reads %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(p1, "g")); err != nil || string(b) != "made\n" {
		t.Fatalf("what n1 wrote in /workspace: %q %v", b, err)
	}
	calls := 0
	err := f.b.Fork(f.ctx, "n1", []string{"n2"}, func(context.Context) ([]string, error) {
		calls++
		return []string{f.files("n2", "f", "two\n")}, nil
	})
	if err != nil || calls != 1 {
		t.Fatalf("fork: %v (files called %d times)", err, calls)
	}
	if got := f.sh("n2", "cat /workspace/f; ls /tmp"); got != "two\nt\n" {
		t.Fatalf("the child sees %q, want its own files and its source's /tmp", got)
	}
	if err := f.b.Suspend(f.ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if err := f.b.Resume(f.ctx, "n1", p1); err != nil {
		t.Fatal(err)
	}
	if got := f.sh("n1", "cat /tmp/t"); got != "kept\n" {
		t.Fatalf("/tmp after suspend and resume: %q", got)
	}
	f.reopen()
	ns, err := f.b.Nodes(f.ctx)
	if err != nil || len(ns) != 2 || ns[0] != (engine.HeldNode{ID: "n1", State: engine.HeldSuspended}) || ns[1].State != engine.HeldSuspended {
		t.Fatalf("after a reopen the backend holds %+v (%v), want n1 and n2 suspended", ns, err)
	}
	if err := f.b.Resume(f.ctx, "n1", p1); err != nil {
		t.Fatal(err)
	}
	if got := f.sh("n1", "cat /tmp/t"); got != "kept\n" {
		t.Fatalf("/tmp after a reopen: %q", got)
	}
	if err := f.b.Stop(f.ctx, "n1"); err != nil {
		t.Fatal(err)
	}
	if p, err := f.b.(*backend).TmpPath("n1"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("a stopped node's /tmp: %q %v, want it gone", p, err)
	}
	// A name that cannot be a node's is refused, and stopping it is a no-op.
	if err := f.b.Start(f.ctx, "../x", p1); !errors.Is(err, api.ErrBadRequest) {
		t.Fatalf("start ../x: %v, want bad_request", err)
	}
	if err := f.b.Stop(f.ctx, "../"+tmpStoreDir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(f.cfg.Dir, tmpStoreDir)); err != nil {
		t.Fatalf("stop ../%s reached outside the node: %v", tmpStoreDir, err)
	}
}

// TestReapAtOpen: a sandbox a killed daemon left under the tree's label
// (here: a manager that is never closed) is killed when the backend opens.
func TestReapAtOpen(t *testing.T) {
	need(t)
	cfg := engine.BackendConfig{Tree: "t1", Dir: t.TempDir(), Base: t.TempDir()}
	old, err := jail.New(jail.Config{StateDir: filepath.Join(cfg.Dir, "jail"), Label: Label(cfg), Spares: -1})
	if err != nil {
		t.Fatal(err)
	}
	ws := t.TempDir()
	sb, err := old.Start(t.Context(), jail.Spec{Name: "n1", Workspace: ws, Tmp: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := sb.Start(jail.ExecSpec{Argv: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(Config{})(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	select {
	case <-p.Done():
	case <-t.Context().Done():
	}
	if _, err := os.Stat(sb.CgroupPaths()[0]); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the left sandbox's cgroup %s: %v, want it reaped", sb.CgroupPaths()[0], err)
	}
	old.Close() // its sandbox is gone already: what it says does not matter
}

// TestStartRAM: a fresh sandbox's RAM is measured, and of the order Caps
// says (its cgroup's charge: 0 to 0.25 MiB here, see StartRAM).
func TestStartRAM(t *testing.T) {
	f := newFixture(t)
	if err := f.b.Start(f.ctx, "n1", f.files("n1", "", "")); err != nil {
		t.Fatal(err)
	}
	ram, err := f.b.RAM(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("a fresh sandbox holds %d bytes (Caps.StartRAM %d)", ram["n1"], StartRAM)
	if v, ok := ram["n1"]; !ok || v < 0 || v > 8*StartRAM {
		t.Fatalf("a fresh sandbox holds %d bytes, Caps says about %d", ram["n1"], StartRAM)
	}
}
