package posixtest_test

import (
	"context"
	"github.com/arbor-dev/arbor/internal/testenv"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/posixtest"
)

// The meta tests run the suite against deliberately broken Envs, in a child
// test process, and check that exactly the cases that should notice fail:
// the suite's checks can fail.

const metaEnv = "ARBOR_POSIXTEST_META"

// lostLowerEnv runs setup in one directory and returns another, empty one:
// a branching filesystem that lost its lower layer.
type lostLowerEnv struct{ posixtest.TempDirEnv }

func (e lostLowerEnv) Lower(t *testing.T, setup func(string)) string {
	setup(e.Dir(t))
	return e.Dir(t)
}

// unreachableEnv makes its directories under a root-owned 0700 directory,
// which uid 65534 cannot search.
type unreachableEnv struct{}

func (unreachableEnv) Dir(t *testing.T) string {
	d, err := os.MkdirTemp(t.TempDir(), "sub") // t.TempDir is 0700
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (e unreachableEnv) Lower(t *testing.T, setup func(string)) string {
	d := e.Dir(t)
	setup(d)
	return d
}

// TestMetaChild runs the suite on the broken Env that metaEnv names; it
// runs only as the child of TestBrokenEnvs.
func TestMetaChild(t *testing.T) {
	switch os.Getenv(metaEnv) {
	case "lost-lower":
		posixtest.Run(t, lostLowerEnv{})
	case "unreachable":
		posixtest.Run(t, unreachableEnv{})
	default:
		t.Skip("runs only as the child of TestBrokenEnvs")
	}
}

func TestBrokenEnvs(t *testing.T) {
	var lower, nobody, all []string
	for _, c := range posixtest.Cases() {
		all = append(all, c.Name)
		if c.Lower != nil {
			lower = append(lower, c.Name)
		}
		if c.Nobody != nil {
			nobody = append(nobody, c.Name)
		}
	}
	if len(lower) < 20 || len(nobody) < 5 {
		t.Fatalf("suite has %d lower cases and %d uid 65534 cases; expected more", len(lower), len(nobody))
	}
	for _, tc := range []struct {
		mode     string
		wantFail []string
		needRoot bool
		wantText string // in the output of every failing case
	}{
		{mode: "lost-lower", wantFail: lower},
		{mode: "unreachable", wantFail: nobody, needRoot: true, wantText: "cannot search and read the case directory"},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			if tc.needRoot && os.Geteuid() != 0 {
				testenv.NeedRoot(t, "the case runs as uid 65534")
			}
			failed, passed, skipped, out := runMetaChild(t, tc.mode)
			// A case may skip where this machine lacks a feature (or root);
			// it then proves nothing either way.
			tc.wantFail = slices.DeleteFunc(slices.Clone(tc.wantFail), func(n string) bool { return slices.Contains(skipped, n) })
			slices.Sort(tc.wantFail)
			if len(skipped) > 0 {
				t.Logf("skipped in the child: %q", skipped)
			}
			if !slices.Equal(failed, tc.wantFail) {
				t.Errorf("failing cases:\n got  %q\n want %q", failed, tc.wantFail)
			}
			for _, name := range all {
				if !slices.Contains(failed, name) && !slices.Contains(passed, name) && !slices.Contains(skipped, name) {
					t.Errorf("case %s did not run", name)
				}
			}
			if tc.wantText != "" && strings.Count(out, tc.wantText) < len(tc.wantFail) {
				t.Errorf("want %q in the output of each of %d failures; output:\n%s", tc.wantText, len(tc.wantFail), out)
			}
			if t.Failed() {
				t.Logf("child output:\n%s", out)
			}
		})
	}
}

var resultLine = regexp.MustCompile(`(?m)^\s*--- (PASS|FAIL|SKIP): TestMetaChild/(\S+)`)

// runMetaChild runs TestMetaChild in a child in mode; it returns the cases
// that failed, passed and skipped, sorted, and the output.
func runMetaChild(t *testing.T, mode string) (failed, passed, skipped []string, out string) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestMetaChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), metaEnv+"="+mode, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	cmd.Dir = filepath.Dir(exe)
	cmd.WaitDelay = time.Second
	b, err := cmd.CombinedOutput()
	out = string(b)
	if ctx.Err() != nil {
		t.Fatalf("child timed out; output:\n%s", out)
	}
	if err == nil {
		t.Fatalf("the suite passed on a broken Env (%s); output:\n%s", mode, out)
	}
	for _, m := range resultLine.FindAllStringSubmatch(out, -1) {
		switch m[1] {
		case "FAIL":
			failed = append(failed, m[2])
		case "PASS":
			passed = append(passed, m[2])
		case "SKIP":
			skipped = append(skipped, m[2])
		}
	}
	slices.Sort(failed)
	slices.Sort(passed)
	slices.Sort(skipped)
	return failed, passed, skipped, out
}
