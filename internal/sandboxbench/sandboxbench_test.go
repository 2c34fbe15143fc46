package sandboxbench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/internal/jail"
	"github.com/arbor-dev/arbor/internal/jailbackend"
	"github.com/arbor-dev/arbor/internal/testenv"
)

func TestMain(m *testing.M) {
	jail.Main() // first: the jail cases' sandboxes re-exec this binary as their init
	os.Exit(m.Run())
}

// TestMainRun runs every case for two rounds through Main, as `arbor bench
// sandbox --json` does, and checks that each case has its jail figures
// (and the tools' where the host has them), all positive, and the table.
func TestMainRun(t *testing.T) {
	testenv.NeedFUSE(t)
	if err := jailbackend.Available(); err != nil {
		testenv.Missing(t, testenv.Cgroup, "no sandboxes here: "+err.Error())
	}
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"--json", "--rounds", "2", "--scratch", t.TempDir()}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"start":    {"first byte of echo"},
		"exec":     {"round trip of true"},
		"kill-100": {"kill until gone"},
		"fork-0":   {"source's pause", "fork incl. child's start"},
		"fork-50M": {"source's pause", "fork incl. child's start"},
		"memory":   {"RSS", "PSS", "anonymous", "cgroup charge"},
	}
	for c, metrics := range want {
		for _, m := range metrics {
			found := false
			for _, r := range rep.Results {
				if r.Case == c && r.Metric == m && r.System == "jail" {
					found = true
					if r.Value <= 0 {
						t.Errorf("%s %s on jail: %v %s", c, m, r.Value, r.Unit)
					}
				}
			}
			if !found {
				t.Errorf("no jail figure for %s %s: %+v", c, m, rep.Results)
			}
		}
	}
	for _, s := range rep.Skipped {
		if s.System == "jail" || s.System == "jail-cold" {
			t.Errorf("jail skipped: %+v", s)
		}
		t.Logf("skipped: %+v", s)
	}
	var table bytes.Buffer
	rep.Table(&table)
	if !strings.Contains(table.String(), "first byte of echo") || !strings.Contains(table.String(), "≤ 20 ms") {
		t.Errorf("table:\n%s", table.String())
	}
	t.Logf("\n%s", table.String())
}

// TestBadUsage: unknown cases and systems and stray arguments are usage
// errors (exit 2 or a failed run naming the choices), not a run.
func TestBadUsage(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"extra"}, &out, &errb); code != 2 {
		t.Errorf("stray argument: exit %d", code)
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"--case", "nope"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "start, exec") {
		t.Errorf("unknown case: exit %d, %q", code, errb.String())
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"--system", "docker"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "jail, jail-cold") {
		t.Errorf("unknown system: exit %d, %q", code, errb.String())
	}
}
