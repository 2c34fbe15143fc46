// Package vmbench is `arbor bench vm`: the vm backend's microVM figures
// (internal/vm) as medians over rounds, with the accelerator QEMU ran on.
//
// Per batch size N (1, 4, 16 by default; 50 with --sizes), each round
// writes 16 MiB in the source's /tmp (the pages its fork saves), forks it
// into N children with one vm.Fork, and records the source's pause, each
// child's time from the fork call to running and to its agent's first
// reply, the batch's total, then the PSS per child after the fork and
// after every child wrote 10 MiB of its own. Suspend and resume run on a
// VM holding a 16 MiB blob. Every VM it starts it kills; the image is
// built once in the cache (--home) and reused.
package vmbench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/arbor-dev/arbor/internal/vm"
	"github.com/arbor-dev/arbor/internal/vmbackend"
)

// Config configures a run.
type Config struct {
	// Rounds per case (default 10); Sizes the fork_batch sizes (default
	// 1, 4, 16).
	Rounds int
	Sizes  []int
	// VM is the image (Home: its cache; Agent: arbor-guest).
	VM vm.Config
	// Scratch holds the VMs' state directories (default the temp dir).
	Scratch string
	// Log gets progress (default none).
	Log io.Writer
}

// Result is one figure: a median over Rounds.
type Result struct {
	Case   string  `json:"case"`
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Rounds int     `json:"rounds"`
}

// Report is a run's figures.
type Report struct {
	Accel      string   `json:"accelerator"`
	AccelWhy   string   `json:"accelerator_why"`
	MemMiB     int      `json:"guest_mem_mib"`
	LoadBefore string   `json:"load_before"`
	LoadAfter  string   `json:"load_after"`
	Results    []Result `json:"results"`
}

func load() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// Run builds (or finds) the image and measures.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.Rounds <= 0 {
		cfg.Rounds = 10
	}
	if len(cfg.Sizes) == 0 {
		cfg.Sizes = []int{1, 4, 16}
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	scratch, err := os.MkdirTemp(cfg.Scratch, "arbor-bench-vm-")
	if err != nil {
		return Report{}, err
	}
	defer os.RemoveAll(scratch)
	rep := Report{LoadBefore: load()}
	cfg.VM.Progress = func(step string) { fmt.Fprintf(cfg.Log, "image: %s\n", step) }
	img, err := vm.Build(ctx, cfg.VM)
	if err != nil {
		return rep, fmt.Errorf("image: %w", err)
	}
	_, rep.AccelWhy = vm.DetectAccel()
	rep.Accel, rep.MemMiB = img.Accel, img.MemMiB
	r := &runner{img: img, dir: scratch, rounds: cfg.Rounds, log: cfg.Log}
	for _, n := range cfg.Sizes {
		res, err := r.forkBatch(ctx, n)
		if err != nil {
			return rep, fmt.Errorf("fork_batch %d: %w", n, err)
		}
		rep.Results = append(rep.Results, res...)
	}
	res, err := r.suspendResume(ctx)
	if err != nil {
		return rep, fmt.Errorf("suspend/resume: %w", err)
	}
	rep.Results = append(rep.Results, res...)
	rep.LoadAfter = load()
	return rep, nil
}

type runner struct {
	img    *vm.Image
	dir    string
	rounds int
	log    io.Writer
	made   int
}

// start starts a VM from the template in a fresh directory.
func (r *runner) start(ctx context.Context, name string) (*vm.VM, error) {
	r.made++
	dir := filepath.Join(r.dir, fmt.Sprintf("%s-%d", name, r.made))
	if err := vm.Seed(dir, r.img.Mem, r.img.Dev); err != nil {
		return nil, err
	}
	return vm.Start(ctx, r.img, dir, name, "")
}

// sh runs script in v; a non-zero exit is an error.
func sh(ctx context.Context, v *vm.VM, script string) error {
	var errb bytes.Buffer
	x, err := v.Exec(ctx, vm.Cmd{Argv: []string{"sh", "-c", script}, Timeout: 2 * time.Minute}, func(s string, d []byte) error {
		if s == "stderr" {
			errb.Write(d)
		}
		return nil
	})
	if err == nil && (x.Code != 0 || x.Signal != "") {
		err = fmt.Errorf("exit %d %s: %s", x.Code, x.Signal, strings.TrimSpace(errb.String()))
	}
	if err != nil {
		return fmt.Errorf("%q: %w", script, err)
	}
	return nil
}

// pssPerChild is the children's PSS summed, per child, in MiB.
func pssPerChild(kids []*vm.VM) (float64, error) {
	var sum int64
	for _, k := range kids {
		p, err := k.PSS()
		if err != nil {
			return 0, err
		}
		sum += p
	}
	return float64(sum) / float64(len(kids)) / (1 << 20), nil
}

const (
	dirtySource = "head -c 16777216 /dev/urandom > /tmp/blob"
	dirtyChild  = "head -c 10485760 /dev/zero | tr '\\0' x > /tmp/dirty"
)

func (r *runner) forkBatch(ctx context.Context, n int) (_ []Result, err error) {
	src, err := r.start(ctx, "src")
	if err != nil {
		return nil, err
	}
	defer src.Kill()
	var pause, running, reply, total, perChild, pss, pssDirty []float64
	for round := range r.rounds {
		if err := sh(ctx, src, dirtySource); err != nil {
			return nil, err
		}
		var dirs, names []string
		for j := range n {
			r.made++
			names = append(names, fmt.Sprintf("c%d", j))
			dirs = append(dirs, filepath.Join(r.dir, fmt.Sprintf("c%d-%d", j, r.made)))
		}
		t0 := time.Now()
		kids, st, err := vm.Fork(ctx, src, dirs, names, nil)
		if err != nil {
			return nil, err
		}
		tot := time.Since(t0)
		res, err := measureKids(ctx, kids)
		for _, k := range kids {
			k.Kill()
		}
		for _, d := range dirs {
			os.RemoveAll(d)
		}
		if err != nil {
			return nil, err
		}
		pause = append(pause, ms(st.Pause))
		for i := range kids {
			running, reply = append(running, ms(st.Running[i])), append(reply, ms(st.Reply[i]))
		}
		total, perChild = append(total, ms(tot)), append(perChild, ms(tot)/float64(n))
		pss, pssDirty = append(pss, res[0]), append(pssDirty, res[1])
		fmt.Fprintf(r.log, "fork_batch %d round %d: pause %.1f ms, total %.1f ms, PSS/child %.1f MiB, %.1f MiB dirtied\n", n, round+1, ms(st.Pause), ms(tot), res[0], res[1])
	}
	c := fmt.Sprintf("fork_batch %d", n)
	return []Result{
		{c, "source pause", median(pause), "ms", r.rounds},
		{c, "fork call to child running (median over children)", median(running), "ms", r.rounds},
		{c, "fork call to child agent's first reply (median over children)", median(reply), "ms", r.rounds},
		{c, "total", median(total), "ms", r.rounds},
		{c, "total per child", median(perChild), "ms", r.rounds},
		{c, "PSS per child after the fork", median(pss), "MiB", r.rounds},
		{c, "PSS per child after each dirtied 10 MiB", median(pssDirty), "MiB", r.rounds},
	}, nil
}

// measureKids is the children's PSS per child just after the fork, and
// after every child wrote 10 MiB (all at once).
func measureKids(ctx context.Context, kids []*vm.VM) ([2]float64, error) {
	var out [2]float64
	var err error
	if out[0], err = pssPerChild(kids); err != nil {
		return out, err
	}
	errs := make([]error, len(kids))
	var wg sync.WaitGroup
	for i, k := range kids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = sh(ctx, k, dirtyChild)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	out[1], err = pssPerChild(kids)
	return out, err
}

func (r *runner) suspendResume(ctx context.Context) ([]Result, error) {
	v, err := r.start(ctx, "s")
	if err != nil {
		return nil, err
	}
	defer func() { v.Kill() }()
	if err := sh(ctx, v, dirtySource); err != nil {
		return nil, err
	}
	var sus, res []float64
	for range r.rounds {
		t0 := time.Now()
		if err := vm.Suspend(ctx, v); err != nil {
			return nil, err
		}
		t1 := time.Now()
		w, err := vm.Start(ctx, r.img, v.Dir(), "s", "")
		if err != nil {
			return nil, err
		}
		v = w
		sus, res = append(sus, ms(t1.Sub(t0))), append(res, ms(time.Since(t1)))
	}
	return []Result{
		{"suspend/resume (16 MiB dirty)", "suspend (save, end)", median(sus), "ms", r.rounds},
		{"suspend/resume (16 MiB dirty)", "resume (start, agent's reply)", median(res), "ms", r.rounds},
	}, nil
}

// Table prints the report.
func (rep Report) Table(w io.Writer) {
	fmt.Fprintf(w, "accelerator: %s (%s)\nguest: %d MiB\nload before: %s, after: %s\n\n", rep.Accel, rep.AccelWhy, rep.MemMiB, rep.LoadBefore, rep.LoadAfter)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "case\tmetric\tmedian\trounds")
	for _, x := range rep.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%d\n", x.Case, x.Metric, strconv.FormatFloat(x.Value, 'f', 1, 64), x.Unit, x.Rounds)
	}
	tw.Flush()
}

// Main is `arbor bench vm`: its flags, the run, the table (or JSON).
// It returns the exit code: 0, 1 (the run failed) or 2 (bad usage).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fset := flag.NewFlagSet("bench vm", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var cfg Config
	asJSON := fset.Bool("json", false, "write the report as JSON instead of a table")
	verbose := fset.Bool("v", false, "log progress to stderr")
	sizes := fset.String("sizes", "1,4,16", "fork_batch sizes, comma-separated (add 50 for the issue's largest)")
	python := fset.Bool("python", false, "include the host's python3 in the guest (a larger image, a slower template boot)")
	home := fset.String("home", "", "image cache (default <user cache dir>/arbor/vm-bench)")
	fset.IntVar(&cfg.Rounds, "rounds", 10, "rounds per case (the report gives medians)")
	fset.IntVar(&cfg.VM.MemMiB, "mem", 256, "guest RAM in MiB")
	fset.StringVar(&cfg.VM.Accel, "accel", "", "kvm or tcg (default: detected)")
	fset.StringVar(&cfg.Scratch, "scratch", "", "directory for the VMs' state (default the temp dir)")
	fset.Usage = func() {
		fmt.Fprintf(stderr, "usage: arbor bench vm [flags]\n\nRuns the vm backend's microVM benchmark: pause, child start, fork_batch, PSS, suspend and resume.\n\n")
		fset.PrintDefaults()
	}
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fset.NArg() > 0 {
		fmt.Fprintf(stderr, "bench vm: unexpected arguments: %s\n", strings.Join(fset.Args(), " "))
		return 2
	}
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > 100 {
			fmt.Fprintf(stderr, "bench vm: --sizes: %q is not a size from 1 to 100\n", f)
			return 2
		}
		cfg.Sizes = append(cfg.Sizes, n)
	}
	if *verbose {
		cfg.Log = stderr
	}
	cfg.VM.Home = *home
	if cfg.VM.Home == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			fmt.Fprintf(stderr, "bench vm: image cache: %v (give --home)\n", err)
			return 1
		}
		cfg.VM.Home = filepath.Join(c, "arbor", "vm-bench")
	}
	agent, err := vmbackend.FindAgent()
	if err != nil {
		fmt.Fprintf(stderr, "bench vm: no guest agent (arbor-guest next to arbor or on PATH): %v\n", err)
		return 1
	}
	cfg.VM.Agent = agent
	if *python {
		cfg.VM.Include = vm.PythonInclude()
	}
	rep, err := Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "bench vm: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return 1
		}
		return 0
	}
	rep.Table(stdout)
	return 0
}
