package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func fork(t *testing.T, v *VM, names ...string) ([]*VM, ForkStats) {
	t.Helper()
	var dirs []string
	for _, n := range names {
		dirs = append(dirs, filepath.Join(t.TempDir(), n))
	}
	kids, st, err := Fork(t.Context(), v, dirs, names, nil)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	for _, k := range kids {
		t.Cleanup(func() { k.Kill() })
	}
	return kids, st
}

// TestForkIsolation: children start with the source's memory as of the
// fork (a tmpfs file, a 64 MiB blob, a running process), never see what
// the source writes after it, nor the source theirs, nor each other's;
// two children draw different random bytes; a child forks again.
func TestForkIsolation(t *testing.T) {
	img := image(t)
	src := startVM(t, img, "src")
	sh(t, src, "echo before > /tmp/state; head -c 67108864 /dev/urandom > /tmp/blob; setsid sh -c 'echo $$ > /tmp/pid; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 & while [ ! -s /tmp/pid ]; do sleep 0.1; done")
	sum := sh(t, src, "md5sum < /tmp/blob")
	kids, st := fork(t, src, "c1", "c2")
	t.Logf("fork: pause %v (dirty %d MiB), complete %v (reflinked %v), running %v, reply %v",
		st.Pause, st.Dirty>>20, st.Complete, st.Reflinked, st.Running, st.Reply)
	if st.Dirty < 64<<20 {
		t.Fatalf("the fork saved %d bytes of dirty RAM, under the 64 MiB blob", st.Dirty)
	}
	// The source writes right after the fork.
	sh(t, src, "echo after > /tmp/state; head -c 67108864 /dev/urandom > /tmp/blob")
	srcSum := sh(t, src, "md5sum < /tmp/blob")
	if srcSum == sum {
		t.Fatal("the source's rewritten blob has the old sum")
	}
	for i, k := range kids {
		if got := sh(t, k, "cat /tmp/state"); got != "before\n" {
			t.Fatalf("child %d reads %q, want the fork-time state", i, got)
		}
		if got := sh(t, k, "md5sum < /tmp/blob"); got != sum {
			t.Fatalf("child %d's blob sums %q, want the fork-time %q", i, got, sum)
		}
		if got := sh(t, k, "kill -0 $(cat /tmp/pid) && echo alive"); got != "alive\n" {
			t.Fatalf("child %d: the source's process is not running: %q", i, got)
		}
		if got := sh(t, k, "hostname"); got != []string{"c1\n", "c2\n"}[i] {
			t.Fatalf("child %d's hostname %q", i, got)
		}
	}
	// The other way round: a child's write is its own.
	sh(t, kids[0], "echo c1 > /tmp/state; head -c 1048576 /dev/zero > /tmp/blob")
	if got := sh(t, src, "cat /tmp/state"); got != "after\n" {
		t.Fatalf("the source reads %q after a child's write", got)
	}
	if got := sh(t, kids[1], "cat /tmp/state; md5sum < /tmp/blob"); got != "before\n"+sum {
		t.Fatalf("child 2 reads %q after child 1's write", got)
	}
	// Fresh randomness per child.
	r1 := sh(t, kids[0], "head -c 32 /dev/urandom | md5sum")
	r2 := sh(t, kids[1], "head -c 32 /dev/urandom | md5sum")
	if r1 == r2 {
		t.Fatalf("two children drew the same random bytes (%s)", r1)
	}
	// A child forks in turn: its grandchild holds the child's state.
	grand, _ := fork(t, kids[0], "g1")
	if got := sh(t, grand[0], "cat /tmp/state; md5sum < /tmp/blob | cut -c1-8"); !strings.HasPrefix(got, "c1\n") {
		t.Fatalf("the grandchild reads %q, want its parent's state", got)
	}
}

// TestSuspendResume: a suspended VM holds no process, and starts again
// from where it was.
func TestSuspendResume(t *testing.T) {
	img := image(t)
	v := startVM(t, img, "s1")
	sh(t, v, "echo kept > /tmp/state")
	if err := Suspend(t.Context(), v); err != nil {
		t.Fatal(err)
	}
	if syscall.Kill(v.Pid(), 0) == nil {
		t.Fatal("the suspended VM's QEMU still runs")
	}
	w, err := Start(t.Context(), img, v.Dir(), "s1", "")
	if err != nil {
		t.Fatal(err)
	}
	defer w.Kill()
	if got := sh(t, w, "cat /tmp/state"); got != "kept\n" {
		t.Fatalf("resumed VM reads %q", got)
	}
}

// TestKillMidFork: the source's QEMU killed inside the fork's pause fails
// the fork with ErrQEMUExited and leaves no child running.
func TestKillMidFork(t *testing.T) {
	img := image(t)
	v := startVM(t, img, "k1")
	dir := filepath.Join(t.TempDir(), "kc")
	_, _, err := Fork(t.Context(), v, []string{dir}, []string{"kc"}, func(context.Context) ([]string, error) {
		return nil, syscall.Kill(v.Pid(), syscall.SIGKILL)
	})
	if !errors.Is(err, ErrQEMUExited) {
		t.Fatalf("fork with its source killed: %v, want ErrQEMUExited", err)
	}
	if HasState(dir) {
		t.Fatal("a failed fork left a child's state")
	}
	ents, _ := os.ReadDir(v.Dir())
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "fork-") {
			t.Fatalf("a failed fork left %s", e.Name())
		}
	}
	_ = fmt.Sprint
}
