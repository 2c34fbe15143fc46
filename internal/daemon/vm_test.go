package daemon

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestVMTreeOverSocket: through the real daemon (FUSE-mounted tree files),
// a vm tree's fork carries the source's memory (a tmpfs file) and each
// child works in its own files at /workspace; a fork_batch gives each child
// its own hostname; a commit carries the child's memory into its parent.
func TestVMTreeOverSocket(t *testing.T) {
	testenv.NeedFUSE(t)
	testenv.NeedQEMU(t)
	bin := tempDir(t)
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "arbor-guest"), "github.com/arbor-dev/arbor/cmd/arbor-guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the guest agent: %v: %s", err, out)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH")) // the daemon finds arbor-guest there
	tg := realTarget(t)
	writeFile(t, filepath.Join(tg.Base, "f"), "from the base\n")
	c := client.New(serveLine(t, tg.Handler))
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	must := mustDo(t, ctx, c)
	tr := must(api.Request{Op: api.OpTreeCreate, TreeID: "vt", Base: tg.Base, Backend: "vm"})
	run := func(node, script string) string {
		t.Helper()
		out, x, err := shIn(ctx, c, "vt", node, script)
		if err != nil || x.ExitCode != 0 {
			t.Fatalf("exec %q in %s: %+v %v (output %q)", script, node, x, err, out)
		}
		return out
	}
	run(tr.Root, "echo source > /tmp/state")
	child := must(api.Request{Op: api.OpTreeFork, TreeID: "vt", SourceID: tr.Root, Label: "child"})
	t.Logf("fork of a live vm node: latency_ns %d", child.LatencyNS)
	run(tr.Root, "echo source-after > /tmp/state")
	if got := run(child.NodeID, "cat /tmp/state /workspace/f; echo mine > /workspace/g; echo child > /tmp/state"); got != "source\nfrom the base\n" {
		t.Fatalf("the child reads %q, want the source's memory as of the fork and the files", got)
	}
	if got := run(tr.Root, "cat /tmp/state; cat /workspace/g 2>&1 || true"); got != "source-after\ncat: can't open '/workspace/g': No such file or directory\n" {
		t.Fatalf("the source reads %q after the child's writes", got)
	}
	fb := must(api.Request{Op: api.OpTreeForkBatch, TreeID: "vt", SourceID: tr.Root, Labels: []string{"a", "b"}})
	for _, f := range fb.Forks {
		if got := run(f.NodeID, "hostname; cat /tmp/state"); got != f.NodeID+"\nsource-after\n" {
			t.Fatalf("batch child %s reads %q", f.NodeID, got)
		}
	}
	must(api.Request{Op: api.OpTreeCommit, TreeID: "vt", NodeID: child.NodeID})
	if got := run(tr.Root, "cat /tmp/state /workspace/g"); got != "child\nmine\n" {
		t.Fatalf("the parent after the commit reads %q, want the child's memory and files", got)
	}
}
