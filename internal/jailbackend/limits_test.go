package jailbackend

import (
	"fmt"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
)

// newLimitedFixture is newFixture with each node limited as a tree's
// budget says.
func newLimitedFixture(t *testing.T, b api.Budget) *fixture {
	need(t)
	f := &fixture{t: t, ctx: t.Context(), cfg: engine.BackendConfig{Tree: "t1", Dir: t.TempDir(), Base: t.TempDir(), Budget: b}}
	f.reopen()
	t.Cleanup(func() { f.b.Close() })
	return f
}

// run runs argv in node and returns its exit and both outputs.
func (f *fixture) run(node string, argv ...string) (api.ExecExit, string) {
	f.t.Helper()
	var out strings.Builder
	x, err := f.b.Exec(f.ctx, node, engine.Command{Argv: argv}, func(c api.ExecOutput) error {
		out.Write(c.Data)
		return nil
	})
	if err != nil {
		f.t.Fatalf("%s: %v: %v", node, argv, err)
	}
	return x, out.String()
}

// TestPidsLimit: a node's processes and threads are limited by the
// budget's MaxNodePids: past it fork fails with EAGAIN, and the node goes
// on (a fork's children get the same limit).
func TestPidsLimit(t *testing.T) {
	f := newLimitedFixture(t, api.Budget{MaxNodePids: 32})
	if err := f.b.Start(f.ctx, "n1", f.files("n1", "", "")); err != nil {
		t.Fatal(err)
	}
	f.fork("n1", "n2")
	// Forks sleepers until fork fails; says how many and why; kills them.
	const bomb = `my @k; while (1) { my $p = fork;
		if (!defined $p) { print scalar(@k), " ", ($!{EAGAIN} ? "EAGAIN" : "$!"), "\n"; kill "KILL", @k; exit 0 }
		if ($p == 0) { sleep 60; exit 0 }
		push @k, $p; if (@k > 1000) { print "no limit\n"; kill "KILL", @k; exit 0 } }`
	for _, n := range []string{"n1", "n2"} {
		x, out := f.run(n, "perl", "-e", bomb)
		var made int
		var why string
		if _, err := fmt.Sscan(out, &made, &why); err != nil || x.ExitCode != 0 || why != "EAGAIN" || made >= 32 || made < 5 {
			t.Fatalf("%s: a fork bomb under max_node_pids 32 says %q (%+v), want EAGAIN after fewer than 32 processes", n, out, x)
		}
		t.Logf("%s: fork failed with EAGAIN after %d processes", n, made)
		if got := f.sh(n, "echo alive"); got != "alive\n" {
			t.Fatalf("%s after the bomb: %q", n, got)
		}
	}
}

// TestMemoryLimit: a node's memory is limited by the budget's
// MaxNodeRAMBytes: a process past it is killed by the kernel, and the
// exec's exit says so (signal KILL, oom_killed); the node goes on, and a
// command within the limit is not marked.
func TestMemoryLimit(t *testing.T) {
	f := newLimitedFixture(t, api.Budget{MaxNodeRAMBytes: 64 << 20})
	if err := f.b.Start(f.ctx, "n1", f.files("n1", "", "")); err != nil {
		t.Fatal(err)
	}
	x, out := f.run("n1", "perl", "-e", `my $x = "a" x (256 << 20); print "survived\n"`)
	if x.Signal != "KILL" || !x.OOMKilled || strings.Contains(out, "survived") {
		t.Fatalf("256 MiB under max_node_ram_bytes 64 MiB: %+v %q, want it killed for memory", x, out)
	}
	x, out = f.run("n1", "perl", "-e", `my $x = "a" x (16 << 20); print "fits\n"`)
	if x.ExitCode != 0 || x.OOMKilled || out != "fits\n" {
		t.Fatalf("16 MiB under 64 MiB: %+v %q", x, out)
	}
	// A shell whose child is killed: the exit is the shell's, the mark
	// says why.
	x, _ = f.run("n1", "sh", "-c", `perl -e 'my $x = "a" x (256 << 20)'; echo "status $?"`)
	if x.ExitCode != 0 || !x.OOMKilled {
		t.Fatalf("a shell whose child ran out of memory: %+v, want exit 0 and oom_killed", x)
	}
}

// TestTmpDiskBudget: what a node's /tmp holds is its disk usage
// (engine.DiskUser), and the budget's MaxDiskBytes limits it: a write
// past it fails with ENOSPC.
func TestTmpDiskBudget(t *testing.T) {
	f := newLimitedFixture(t, api.Budget{MaxDiskBytes: 8 << 20})
	if err := f.b.Start(f.ctx, "n1", f.files("n1", "", "")); err != nil {
		t.Fatal(err)
	}
	f.sh("n1", "head -c 2097152 /dev/urandom > /tmp/two")
	du := f.b.(engine.DiskUser).DiskUsage()
	if du["n1"] < 2<<20 || du["n1"] > 3<<20 {
		t.Fatalf("n1's /tmp holds 2 MiB, DiskUsage says %d bytes (%v)", du["n1"], du)
	}
	x, out := f.run("n1", "sh", "-c", "head -c 16777216 /dev/zero > /tmp/big")
	if x.ExitCode == 0 || !strings.Contains(out, "No space left on device") {
		t.Fatalf("16 MiB into /tmp under an 8 MiB disk budget: %+v %q, want ENOSPC", x, out)
	}
}
