package vmbench

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/internal/testenv"
	"github.com/arbor-dev/arbor/internal/vm"
)

// TestRun runs one round of a fork_batch of 2 and of suspend/resume on a
// real microVM: every figure is measured (positive), the children's PSS
// grows when they write, and the table names the accelerator.
func TestRun(t *testing.T) {
	testenv.NeedQEMU(t)
	home := os.Getenv("ARBOR_VM_TEST_HOME") // shared with internal/vm's tests' images
	if home == "" {
		home = t.TempDir()
	}
	agent := filepath.Join(t.TempDir(), "arbor-guest")
	build := exec.Command("go", "build", "-o", agent, "github.com/arbor-dev/arbor/cmd/arbor-guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the guest agent: %v: %s", err, out)
	}
	rep, err := Run(t.Context(), Config{Rounds: 1, Sizes: []int{2}, VM: vm.Config{Home: home, Agent: agent}, Scratch: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Accel != vm.KVM && rep.Accel != vm.TCG {
		t.Errorf("accelerator %q", rep.Accel)
	}
	got := map[string]float64{}
	for _, r := range rep.Results {
		if r.Value <= 0 || r.Rounds != 1 {
			t.Errorf("%s %s: %v %s over %d rounds", r.Case, r.Metric, r.Value, r.Unit, r.Rounds)
		}
		got[r.Case+"/"+r.Metric] = r.Value
	}
	if len(rep.Results) != 9 {
		t.Errorf("%d results, want 7 for the batch and 2 for suspend/resume: %+v", len(rep.Results), rep.Results)
	}
	if a, b := got["fork_batch 2/PSS per child after the fork"], got["fork_batch 2/PSS per child after each dirtied 10 MiB"]; b < a+5 {
		t.Errorf("PSS per child %.1f MiB after the fork, %.1f MiB after writing 10 MiB", a, b)
	}
	if r, a := got["fork_batch 2/fork call to child running (median over children)"], got["fork_batch 2/fork call to child agent's first reply (median over children)"]; a < r {
		t.Errorf("agent's reply at %.1f ms before running at %.1f ms", a, r)
	}
	var out bytes.Buffer
	rep.Table(&out)
	if !strings.Contains(out.String(), "accelerator: "+rep.Accel) {
		t.Errorf("the table does not name the accelerator:\n%s", out.String())
	}
}
