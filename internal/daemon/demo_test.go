package daemon

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/demo"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestDemoInSandboxes runs `arbor demo coding-agent` against the real
// daemon where it serves jail trees: the default backend is then jail, each
// agent runs in its node's sandbox with the workspace in the node's /tmp
// (the 50 MiB vendored.bin included), one fork_batch of the live source
// makes the three children, every claim of the demo holds, and the summary
// names the backend, the source's pause and each sandbox's start.
func TestDemoInSandboxes(t *testing.T) {
	needJail(t)
	testenv.NeedCommand(t, testenv.Python, "python3")
	dir := tempDir(t)
	home := filepath.Join(dir, "home")
	startDaemon(t, Config{Home: home})
	cl := client.New(filepath.Join(home, "arbord.sock"))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 150*time.Second)
	defer cancel()
	var out bytes.Buffer
	sum, err := demo.CodingAgent(ctx, demo.Config{Client: cl, Workdir: filepath.Join(dir, "work"), Out: &out})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if sum.Backend != demo.BackendJail || sum.BackendNote != "" {
		t.Fatalf("backend %q (%s), want jail", sum.Backend, sum.BackendNote)
	}
	if sum.SourcePauseNS <= 0 || sum.SourcePauseNS >= sum.ForkLatencyNS {
		t.Errorf("source's pause %d ns (fork_batch %d ns)", sum.SourcePauseNS, sum.ForkLatencyNS)
	}
	for _, label := range []string{demo.Source, demo.Minimal, demo.Rewrite, demo.Skip} {
		if sum.SandboxStartNS[label] <= 0 {
			t.Errorf("%s's sandbox start: %d ns", label, sum.SandboxStartNS[label])
		}
		if e := sum.StateEvidence[label]; e.VendoredSize != demo.DefaultVendoredBytes {
			t.Errorf("%s: vendored.bin of %d bytes", label, e.VendoredSize)
		}
	}
	for _, c := range sum.Checks {
		if !c.OK {
			t.Errorf("claim failed: %s (%s)", c.Name, c.Detail)
		}
	}
	if !strings.Contains(out.String(), "backend jail") || !strings.Contains(out.String(), "the source's pause for the fork") {
		t.Errorf("the summary does not name the backend and the pause:\n%s", out.String())
	}
	t.Logf("pause %.3f ms, fork_batch %.3f ms, starts %v", float64(sum.SourcePauseNS)/1e6, sum.ForkLatencyMS, sum.SandboxStartNS)
}

// TestDemoInVMs runs `arbor demo coding-agent --backend vm` against the
// real daemon: each agent runs in its node's microVM with the workspace in
// the guest's /tmp (tmpfs, the 50 MiB vendored.bin in guest RAM), one
// fork_batch of the live source VM makes the three children, every claim
// of the demo holds, and the summary reports the source's pause, each
// child's time to running and to its first exec reply, and its PSS.
func TestDemoInVMs(t *testing.T) {
	testenv.NeedFUSE(t)
	testenv.NeedQEMU(t)
	testenv.NeedCommand(t, testenv.Python, "python3")
	dir := tempDir(t)
	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "arbor-guest"), "github.com/arbor-dev/arbor/cmd/arbor-guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the guest agent: %v: %s", err, out)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH")) // the daemon finds arbor-guest there
	home := filepath.Join(dir, "home")
	startDaemon(t, Config{Home: home})
	cl := client.New(filepath.Join(home, "arbord.sock"))
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	var out bytes.Buffer
	sum, err := demo.CodingAgent(ctx, demo.Config{Client: cl, Workdir: filepath.Join(dir, "work"), Out: &out, Backend: demo.BackendVM, AgentTimeout: 2 * time.Minute})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if sum.Backend != demo.BackendVM {
		t.Fatalf("backend %q, want vm", sum.Backend)
	}
	if sum.SourcePauseNS <= 0 || sum.SourcePauseNS >= sum.ForkLatencyNS {
		t.Errorf("source's pause %d ns (fork_batch %d ns)", sum.SourcePauseNS, sum.ForkLatencyNS)
	}
	for _, label := range []string{demo.Source, demo.Minimal, demo.Rewrite, demo.Skip} {
		if sum.SandboxStartNS[label] <= 0 {
			t.Errorf("%s's time to running: %d ns", label, sum.SandboxStartNS[label])
		}
		if sum.RAMBytes[label] <= 0 {
			t.Errorf("%s's PSS: %d bytes", label, sum.RAMBytes[label])
		}
		if e := sum.StateEvidence[label]; e.VendoredSize != demo.DefaultVendoredBytes {
			t.Errorf("%s: vendored.bin of %d bytes", label, e.VendoredSize)
		}
		if label != demo.Source && (sum.FirstReplyNS[label] <= sum.SandboxStartNS[label]) {
			t.Errorf("%s: first reply at %d ns, running at %d ns", label, sum.FirstReplyNS[label], sum.SandboxStartNS[label])
		}
	}
	for _, c := range sum.Checks {
		if !c.OK {
			t.Errorf("claim failed: %s (%s)", c.Name, c.Detail)
		}
	}
	if !strings.Contains(out.String(), "backend vm") || !strings.Contains(out.String(), "the source's pause for the fork") {
		t.Errorf("the summary does not name the backend and the pause:\n%s", out.String())
	}
	t.Logf("pause %.3f ms, fork_batch %.3f ms, running %v, first reply %v, RAM %v", float64(sum.SourcePauseNS)/1e6, sum.ForkLatencyMS, sum.SandboxStartNS, sum.FirstReplyNS, sum.RAMBytes)
}
