package posixtest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The child protocol: the parent re-executes its own test binary with these
// variables set and -test.run=^$ (so a binary whose TestMain does not call
// Main runs nothing and prints no marker); Main sees them, becomes uid
// 65534, runs the named case's Nobody on the directory and prints one marker
// line.
const (
	envChildCase = "ARBOR_POSIXTEST_NOBODY_CASE"
	envChildDir  = "ARBOR_POSIXTEST_NOBODY_DIR"
	markerOK     = "posixtest-nobody: ok"
	markerFail   = "posixtest-nobody: fail: "

	nobodyID = 65534
	// childTimeout bounds one child; a hung FUSE server must not hang CI.
	childTimeout = 30 * time.Second
)

// Main runs the tests of a package that calls Run, and must be called from
// its TestMain (or ServeChild must be):
//
//	func TestMain(m *testing.M) { posixtest.Main(m) }
//
// In a child started by a case's Nobody step it runs that step instead and
// exits; otherwise it runs m and exits with its code.
func Main(m *testing.M) {
	ServeChild()
	os.Exit(m.Run())
}

// ServeChild is Main's first half, for a TestMain that has work of its own:
// if this process is a child started by a case's Nobody step, it runs that
// step and exits; otherwise it returns at once. Call it before anything
// else in TestMain (in particular before mounting anything).
func ServeChild() {
	if name := os.Getenv(envChildCase); name != "" {
		os.Exit(nobodyChild(name, os.Getenv(envChildDir)))
	}
}

// nobodyChild drops to uid and gid 65534 and runs case name's Nobody on
// dir, printing the marker. It returns the exit code.
func nobodyChild(name, dir string) int {
	err := runAsNobody(name, dir)
	if err != nil {
		// One line: newlines of joined errors become " | ".
		fmt.Println(markerFail + strings.ReplaceAll(err.Error(), "\n", " | "))
		return 1
	}
	fmt.Println(markerOK)
	return 0
}

func runAsNobody(name, dir string) error {
	// Groups first: after setuid the process may no longer change them.
	// syscall's Setgroups/Setgid/Setuid apply to every thread.
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(nobodyID); err != nil {
		return fmt.Errorf("setgid %d: %w", nobodyID, err)
	}
	if err := syscall.Setuid(nobodyID); err != nil {
		return fmt.Errorf("setuid %d: %w", nobodyID, err)
	}
	if err := checkNobody(); err != nil {
		return err
	}
	for _, c := range Cases() {
		if c.Name == name && c.Nobody != nil {
			return c.Nobody(dir)
		}
	}
	return fmt.Errorf("no case %q with a Nobody step", name)
}

// checkNobody verifies the drop: every id 65534, no groups, no
// capabilities. A check that passed as root would be worthless.
func checkNobody() error {
	if u, eu, g, eg := os.Getuid(), os.Geteuid(), os.Getgid(), os.Getegid(); u != nobodyID || eu != nobodyID || g != nobodyID || eg != nobodyID {
		return fmt.Errorf("privilege drop: uid %d euid %d gid %d egid %d, want all %d", u, eu, g, eg, nobodyID)
	}
	if gs, err := os.Getgroups(); err != nil || len(gs) != 0 {
		return fmt.Errorf("privilege drop: supplementary groups %v (%v), want none", gs, err)
	}
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return fmt.Errorf("privilege drop: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, found := strings.CutPrefix(sc.Text(), "CapEff:"); found {
			if strings.Trim(strings.TrimSpace(v), "0") != "" {
				return fmt.Errorf("privilege drop: effective capabilities %s, want none", strings.TrimSpace(v))
			}
			return nil
		}
	}
	return fmt.Errorf("privilege drop: no CapEff in /proc/self/status")
}

// runNobody runs case name's Nobody step on dir in a child process as uid
// 65534 and fails t with what the child reports.
func runNobody(t *testing.T, name, dir string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("own test binary: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), childTimeout)
	defer cancel()
	// The child starts as root and drops its ids itself (in Main): exec as
	// 65534 would need the go build directory (mode 0700) to be searchable.
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	// A race-enabled binary sleeps a second at exit unless told not to.
	gorace := strings.TrimSpace(os.Getenv("GORACE") + " atexit_sleep_ms=0")
	cmd.Env = append(os.Environ(), envChildCase+"="+name, envChildDir+"="+dir, "GORACE="+gorace)
	cmd.Dir = "/"
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	text := string(out)
	switch {
	case strings.Contains(text, markerOK) && err == nil:
		return
	case strings.Contains(text, markerFail):
		i := strings.Index(text, markerFail)
		line, _, _ := strings.Cut(text[i+len(markerFail):], "\n")
		t.Fatalf("as uid %d: %s", nobodyID, line)
	case ctx.Err() != nil:
		t.Fatalf("as uid %d: child timed out after %v; output:\n%s", nobodyID, childTimeout, text)
	default:
		t.Fatalf("as uid %d: the child did not run the check (does this package's TestMain call posixtest.Main or posixtest.ServeChild?); exit %v; output:\n%s", nobodyID, err, text)
	}
}
