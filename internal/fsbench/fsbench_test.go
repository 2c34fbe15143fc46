package fsbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/arbor-dev/arbor/internal/testenv"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"golang.org/x/sys/unix"
)

// smallConfig is a run small enough for CI: every case, in seconds.
func smallConfig(t testing.TB) Config {
	mod := t.TempDir()
	if err := generateModule(mod); err != nil {
		t.Fatal(err)
	}
	return Config{
		Size: 4 << 20, Files: 200, Rounds: 1, GitFiles: 200,
		Scratch: t.TempDir(), GoModule: mod, GoCache: t.TempDir(), QuickCold: true,
	}
}

func withTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// assertClean fails when anything of the run is left in scratch: files or
// mounts.
func assertClean(t *testing.T, scratch string) {
	t.Helper()
	if left := detachUnder(scratch); len(left) > 0 {
		t.Errorf("mounts left behind under %s: %v", scratch, left)
	}
	entries, err := os.ReadDir(scratch)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left behind in scratch: %s", e.Name())
	}
}

// TestSmall runs every case on every baseline this machine has, at a tiny
// size, and checks that each ran (or was skipped for its documented
// reason), that the figures are sane, and that nothing is left behind.
func TestSmall(t *testing.T) {
	cfg := smallConfig(t)
	ctx := withTimeout(t, 90*time.Second)
	start := time.Now()
	rep, err := Run(ctx, cfg, Baselines())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("run took %v", time.Since(start))
	var tbl bytes.Buffer
	rep.Table(&tbl)
	t.Logf("\n%s", tbl.String())
	assertClean(t, cfg.Scratch)

	skipped := map[string]string{} // "system/case" or "system"
	for _, s := range rep.Skipped {
		key := s.System
		if s.Case != "" {
			key += "/" + s.Case
		}
		skipped[key] = s.Reason
	}
	available := map[string]bool{}
	for _, sys := range Baselines() {
		name := sys.Name()
		if reason, ok := skipped[name]; ok {
			if testenv.Required(name) {
				t.Errorf("%s unavailable but %s requires it: %s", name, testenv.Env, reason)
			} else {
				t.Logf("%s skipped: %s", name, reason)
			}
			continue
		}
		available[name] = true
	}
	if !available[Baseline] {
		t.Fatalf("native did not run")
	}
	for name := range available {
		_, brancher := NewOverlay().(Brancher)
		if name == Baseline {
			brancher = false
		}
		for _, c := range cases {
			res, ok := rep.Result(name, c.name)
			reason, wasSkipped := skipped[name+"/"+c.name]
			switch {
			case ok && wasSkipped:
				t.Errorf("%s/%s both ran and was skipped", name, c.name)
			case ok:
				if want := cfg.Rounds * lapsOf(c); res.Value <= 0 || res.Median <= 0 || len(res.Samples) != want {
					t.Errorf("%s/%s: implausible result %+v", name, c.name, res)
				}
				if name == Baseline && res.Ratio != 1 {
					t.Errorf("%s/%s: ratio %v, want 1", name, c.name, res.Ratio)
				}
			case c.brancher && !brancher:
				if reason != "not a Brancher" {
					t.Errorf("%s/%s: skip reason %q, want not a Brancher", name, c.name, reason)
				}
			case strings.HasPrefix(c.name, "commit-") && brancher:
				if !strings.Contains(reason, "cannot commit") {
					t.Errorf("%s/%s: skip reason %q, want cannot commit", name, c.name, reason)
				}
			case c.cold && !isRoot():
				t.Logf("%s/%s skipped: %s", name, c.name, reason)
			case wasSkipped && strings.Contains(reason, "is not installed"):
				t.Logf("%s/%s skipped: %s", name, c.name, reason)
			default:
				t.Errorf("%s/%s did not run (skip reason %q)", name, c.name, reason)
			}
		}
	}
	if isRoot() && available["overlayfs"] {
		if _, ok := rep.Result("overlayfs", "branch-create-large"); !ok {
			t.Errorf("overlayfs mount time (branch-create-large) missing")
		}
	}

	var js bytes.Buffer
	if err := rep.JSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil {
		t.Fatalf("JSON does not read back: %v", err)
	}
	if len(back.Results) != len(rep.Results) || back.Results[0].Median != rep.Results[0].Median {
		t.Errorf("JSON round trip lost results")
	}
	for name := range available {
		if !strings.Contains(tbl.String(), name) {
			t.Errorf("table has no column %s", name)
		}
	}
	// About 10 s on a quiet 2-core machine; twice that when it is busy.
	if d := time.Since(start); d > 60*time.Second {
		t.Errorf("TestSmall took %v; its budget is 30 s", d)
	} else if d > 30*time.Second {
		t.Logf("TestSmall took %v, over its 30 s budget (busy machine?)", d)
	}
}

// lapsOf is the number of samples a case records per round.
func lapsOf(c *caseDef) int {
	if c.perLap {
		return branchesPer
	}
	return 1
}

// TestColdDropsCaches runs a cold case with the real cache drop once.
func TestColdDropsCaches(t *testing.T) {
	testenv.NeedRoot(t, "dropping caches")
	cfg := smallConfig(t)
	cfg.QuickCold = false
	cfg.Cases = []string{"stat-cold"}
	rep, err := Run(withTimeout(t, 30*time.Second), cfg, []System{NewNative()})
	if err != nil {
		t.Fatal(err)
	}
	if res, ok := rep.Result(Baseline, "stat-cold"); !ok || res.Value <= 0 {
		t.Errorf("stat-cold: %+v, %v", res, ok)
	}
	assertClean(t, cfg.Scratch)
}

// TestRequireRoot makes CI fail when it runs without the privileges the
// overlayfs baselines need.
func TestRequireRoot(t *testing.T) {
	testenv.NeedRoot(t, "overlayfs and cold cases")
}

// copyBrancher is a Brancher for the harness's own tests: a branch is a
// full copy of the root, commit copies .fsbench back into the root.
type copyBrancher struct {
	root, scratch string
	n             int
	live          map[string]bool
}

func (c *copyBrancher) Name() string { return "copy" }

func (c *copyBrancher) Setup(ctx context.Context, base, scratch string) (string, error) {
	c.root, c.scratch, c.live = base, scratch, map[string]bool{}
	return base, nil
}

func (c *copyBrancher) Teardown(ctx context.Context) error {
	if len(c.live) > 0 {
		return fmt.Errorf("%d branches left", len(c.live))
	}
	return nil
}

func (c *copyBrancher) Branch(ctx context.Context) (Branch, error) {
	c.n++
	d := filepath.Join(c.scratch, fmt.Sprintf("b%d", c.n))
	if err := copyTree(c.root, d); err != nil {
		return nil, err
	}
	c.live[d] = true
	return &copyBranch{c: c, dir: d}, nil
}

type copyBranch struct {
	c   *copyBrancher
	dir string
}

func (b *copyBranch) Root() string { return b.dir }

func (b *copyBranch) Commit(ctx context.Context, opts CommitOptions) error {
	if !opts.IntoBase {
		return fmt.Errorf("copy has no in-store parent: %w", errors.ErrUnsupported)
	}
	if err := copyTree(filepath.Join(b.dir, ".fsbench"), filepath.Join(b.c.root, ".fsbench")); err != nil {
		return err
	}
	if opts.Durable {
		unix.Sync()
	}
	return b.Abort(ctx)
}

func (b *copyBranch) Abort(ctx context.Context) error {
	delete(b.c.live, b.dir)
	return os.RemoveAll(b.dir)
}

// TestBrancherCases drives the branch, commit and abort cases through a
// Brancher that can commit, including the skip of an unsupported variant.
func TestBrancherCases(t *testing.T) {
	cfg := smallConfig(t)
	cfg.Files, cfg.Rounds = 20, 3
	var names []string
	for _, c := range cases {
		if c.brancher {
			names = append(names, c.name)
		}
	}
	cfg.Cases = names
	rep, err := Run(withTimeout(t, 30*time.Second), cfg, []System{NewNative(), &copyBrancher{}})
	if err != nil {
		t.Fatal(err)
	}
	assertClean(t, cfg.Scratch)
	for _, want := range []string{"branch-create-small", "branch-create-large", "commit-1K-base", "commit-100M-base-durable", "abort-1M"} {
		res, ok := rep.Result("copy", want)
		if !ok || res.Value <= 0 || len(res.Samples) != 3*lapsOf(caseByName(want)) {
			t.Errorf("copy/%s: %+v, %v", want, res, ok)
		}
	}
	if res, _ := rep.Result("copy", "commit-100M-base"); res.Bytes != cfg.Size {
		t.Errorf("commit-100M-base wrote %d bytes, want the capped size %d", res.Bytes, cfg.Size)
	}
	found := false
	for _, s := range rep.Skipped {
		if s.System == "copy" && s.Case == "commit-1K" && strings.Contains(s.Reason, "no in-store parent") {
			found = true
		}
	}
	if !found {
		t.Errorf("commit-1K not skipped as unsupported: %+v", rep.Skipped)
	}
}

// leaky mounts a tmpfs in its scratch and does not unmount it.
type leaky struct{ native }

func (leaky) Name() string { return "leaky" }

func (leaky) Setup(ctx context.Context, base, scratch string) (string, error) {
	return base, unix.Mount("tmpfs", scratch, "tmpfs", 0, "size=1m")
}

func TestLeftMountsAreDetachedAndReported(t *testing.T) {
	testenv.NeedRoot(t, "to mount tmpfs")
	cfg := smallConfig(t)
	cfg.Cases = []string{"stat-warm"}
	_, err := Run(withTimeout(t, 30*time.Second), cfg, []System{leaky{}})
	if err == nil || !strings.Contains(err.Error(), "left mounts behind") {
		t.Fatalf("err = %v, want left mounts behind", err)
	}
	assertClean(t, cfg.Scratch)
}

// failing fails its Setup halfway; the run must stop with its error.
type failing struct{ native }

func (failing) Name() string { return "failing" }

func (failing) Setup(ctx context.Context, base, scratch string) (string, error) {
	return "", errors.New("boom")
}

type unavailable struct{ native }

func (unavailable) Name() string { return "unavailable" }

func (unavailable) Setup(ctx context.Context, base, scratch string) (string, error) {
	return "", fmt.Errorf("no such thing here: %w", errors.ErrUnsupported)
}

func TestSystemErrors(t *testing.T) {
	tests := []struct {
		name    string
		systems []System
		wantErr string
		skipped string
	}{
		{"setup fails", []System{NewNative(), failing{}}, "boom", ""},
		{"unavailable is skipped", []System{NewNative(), unavailable{}}, "", "no such thing here"},
		{"duplicate names", []System{NewNative(), NewNative()}, "two systems named", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := smallConfig(t)
			cfg.Cases = []string{"open-read"}
			rep, err := Run(withTimeout(t, 30*time.Second), cfg, tt.systems)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if tt.skipped != "" && (len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0].Reason, tt.skipped)) {
				t.Errorf("skipped = %+v, want %q", rep.Skipped, tt.skipped)
			}
			assertClean(t, cfg.Scratch)
		})
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"unknown case", Config{Cases: []string{"nope"}}},
		{"tiny size", Config{Size: 1000}},
		{"negative files", Config{Files: -1}},
		{"negative rounds", Config{Rounds: -2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Scratch = t.TempDir()
			_, err := Run(context.Background(), tt.cfg, Baselines())
			if !errors.Is(err, api.ErrBadRequest) {
				t.Fatalf("err = %v, want ErrBadRequest", err)
			}
		})
	}
	_, err := Run(context.Background(), Config{Systems: []string{"zfs"}, Scratch: t.TempDir()}, Baselines())
	if !errors.Is(err, api.ErrBadRequest) || !strings.Contains(err.Error(), "fuse-overlayfs") {
		t.Fatalf("unknown system: err = %v", err)
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		bad  bool
	}{
		{"1G", 1 << 30, false}, {"64M", 64 << 20, false}, {"4k", 4 << 10, false},
		{"1GiB", 1 << 30, false}, {"2MB", 2 << 20, false}, {"123", 123, false},
		{"", 0, true}, {"1X", 0, true}, {"-1M", 0, true}, {"99999999T", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, bad=%v", tt.in, got, err, tt.want, tt.bad)
		}
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []time.Duration
		want time.Duration
	}{
		{nil, 0}, {[]time.Duration{5}, 5}, {[]time.Duration{9, 1, 5}, 5}, {[]time.Duration{4, 1, 3, 2}, 2},
	}
	for _, tt := range tests {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestResultValues(t *testing.T) {
	tests := []struct {
		r    Result
		want float64
	}{
		{Result{Unit: unitMiBps, Samples: []time.Duration{time.Second}, Bytes: 512 << 20}, 512},
		{Result{Unit: unitKIOPS, Samples: []time.Duration{time.Second / 2}, Ops: 1000}, 2},
		{Result{Unit: unitUsOp, Samples: []time.Duration{10 * time.Millisecond}, Ops: 1000}, 10},
		{Result{Unit: unitMs, Samples: []time.Duration{3 * time.Millisecond, 5 * time.Millisecond, 4 * time.Millisecond}, Ops: 1}, 4},
	}
	for _, tt := range tests {
		tt.r.finish()
		if d := tt.r.Value - tt.want; d > 1e-9 || d < -1e-9 {
			t.Errorf("%s: value %v, want %v", tt.r.Unit, tt.r.Value, tt.want)
		}
	}
	rep := Report{Results: []Result{
		{System: Baseline, Case: "a", Value: 100}, {System: "x", Case: "a", Value: 50}, {System: "x", Case: "b", Value: 3},
	}}
	rep.computeRatios()
	if r, _ := rep.Result("x", "a"); r.Ratio != 0.5 {
		t.Errorf("ratio %v, want 0.5", r.Ratio)
	}
	if r, _ := rep.Result("x", "b"); r.Ratio != 0 {
		t.Errorf("ratio without a baseline %v, want 0", r.Ratio)
	}
}

func TestMain_Flags(t *testing.T) {
	tests := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"--list"}, 0, "git-status"},
		{[]string{"--bogus"}, 2, ""},
		{[]string{"--size", "lots"}, 2, ""},
		{[]string{"extra"}, 2, ""},
		{[]string{"--case", "nope", "--scratch", os.TempDir()}, 1, ""},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		code := Main(context.Background(), tt.args, &out, &errb, nil)
		if code != tt.code || !strings.Contains(out.String(), tt.out) {
			t.Errorf("Main(%v) = %d, stdout %q, stderr %q; want %d containing %q", tt.args, code, out.String(), errb.String(), tt.code, tt.out)
		}
	}
}

// TestMain_Run runs the CLI entry point end to end on two cases and
// checks the table and the JSON.
func TestMain_Run(t *testing.T) {
	scratch := t.TempDir()
	for _, asJSON := range []bool{false, true} {
		args := []string{"--size", "1M", "--files", "50", "--rounds", "3", "--case", "stat-warm,open-read", "--system", "native,copy", "--scratch", scratch}
		if asJSON {
			args = append(args, "--json")
		}
		var out, errb bytes.Buffer
		if code := Main(context.Background(), args, &out, &errb, []System{&copyBrancher{}}); code != 0 {
			t.Fatalf("Main = %d: %s", code, errb.String())
		}
		if asJSON {
			var rep Report
			if err := json.Unmarshal(out.Bytes(), &rep); err != nil || len(rep.Results) != 4 {
				t.Fatalf("JSON report: %v, %d results:\n%s", err, len(rep.Results), out.String())
			}
		} else if !strings.Contains(out.String(), "stat-warm") || !strings.Contains(out.String(), "copy") {
			t.Errorf("table:\n%s", out.String())
		}
	}
	assertClean(t, scratch)
}

// BenchmarkFS runs the cases as sub-benchmarks, BenchmarkFS/<system>/<case>.
// Small by default; scale with ARBOR_BENCH_SIZE (e.g. 1G), ARBOR_BENCH_FILES,
// ARBOR_BENCH_SCRATCH (the disk under test). Select with -bench, e.g.
// -bench 'FS/overlayfs/stat'.
func BenchmarkFS(b *testing.B) {
	cfg := Config{Size: 64 << 20, Files: 1000, GitFiles: 1000, Scratch: os.Getenv("ARBOR_BENCH_SCRATCH")}
	if v := os.Getenv("ARBOR_BENCH_SIZE"); v != "" {
		n, err := ParseSize(v)
		if err != nil {
			b.Fatalf("ARBOR_BENCH_SIZE: %v", err)
		}
		cfg.Size = n
	}
	if v := os.Getenv("ARBOR_BENCH_FILES"); v != "" {
		if _, err := fmt.Sscan(v, &cfg.Files); err != nil {
			b.Fatalf("ARBOR_BENCH_FILES: %v", err)
		}
	}
	Bench(b, cfg, Baselines())
}

// TestGoBuildOfBrokenModuleIsSkipped checks that a module that does not
// compile skips go-build with the compiler's message instead of failing
// the run (the shared tree is often mid-change).
func TestGoBuildOfBrokenModuleIsSkipped(t *testing.T) {
	cfg := smallConfig(t)
	if err := os.WriteFile(filepath.Join(cfg.GoModule, "p0", "broken.go"), []byte("package p0\nfunc Broken() { undefinedThing() }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Cases = []string{"go-build"}
	rep, err := Run(withTimeout(t, 30*time.Second), cfg, []System{NewNative()})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Skipped) != 1 || !strings.Contains(rep.Skipped[0].Reason, "undefinedThing") {
		t.Errorf("skipped = %+v, want go-build skipped with the compile error", rep.Skipped)
	}
	assertClean(t, cfg.Scratch)
}
