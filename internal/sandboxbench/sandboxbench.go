package sandboxbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/jail"
	"github.com/arbor-dev/arbor/internal/jailbackend"
	"github.com/arbor-dev/arbor/internal/workspace"
)

// Config configures a run. Its zero value runs every case on every system.
type Config struct {
	// Rounds is how many times each timed case runs (default 20).
	Rounds int
	// Scratch is the directory the run works in (default the temp dir).
	Scratch string
	// Cases and Systems select what runs (default all).
	Cases, Systems []string
	// Logger gets progress (default none).
	Logger *slog.Logger
}

// Result is one figure: the median of a case's rounds on one system, or a
// measured quantity (memory).
type Result struct {
	Case   string  `json:"case"`
	Metric string  `json:"metric"` // what of the case: "first byte", "pause", "RSS", ...
	System string  `json:"system"`
	Value  float64 `json:"value"`
	Unit   string  `json:"unit"`
	Rounds int     `json:"rounds"`
}

// Skip says why a system did not run a case.
type Skip struct {
	Case   string `json:"case"`
	System string `json:"system"`
	Reason string `json:"reason"`
}

// Report is a run's figures.
type Report struct {
	Rounds     int      `json:"rounds"`
	Kernel     string   `json:"kernel"`
	CPUs       int      `json:"cpus"`
	LoadBefore string   `json:"load_before"`
	LoadAfter  string   `json:"load_after"`
	Results    []Result `json:"results"`
	Skipped    []Skip   `json:"skipped,omitempty"`
}

// Systems are the systems a run compares, in the report's column order.
var Systems = []string{"jail", "jail-cold", "bwrap", "unshare", "host"}

// caseDef is one case: what each system that can run it does.
type caseDef struct {
	name string
	run  map[string]caseFunc
}

// caseFunc runs a case on one system: its figures, or an error (errSkip
// for a system this host cannot run).
type caseFunc func(r *runner, ctx context.Context) ([]Result, error)

// cases are every case, in the report's row order.
var cases = []caseDef{
	{"start", map[string]caseFunc{
		"jail":      func(r *runner, ctx context.Context) ([]Result, error) { return r.startJail(ctx, 1) },
		"jail-cold": func(r *runner, ctx context.Context) ([]Result, error) { return r.startJail(ctx, -1) },
		"bwrap":     func(r *runner, ctx context.Context) ([]Result, error) { return r.startTool(ctx, "bwrap") },
		"unshare":   func(r *runner, ctx context.Context) ([]Result, error) { return r.startTool(ctx, "unshare") },
	}},
	{"exec", map[string]caseFunc{
		"jail":    (*runner).execJail,
		"unshare": (*runner).execNsenter,
		"host":    (*runner).execHost,
	}},
	{"kill-100", map[string]caseFunc{
		"jail":    (*runner).kill100Jail,
		"bwrap":   func(r *runner, ctx context.Context) ([]Result, error) { return r.kill100Tool(ctx, "bwrap") },
		"unshare": func(r *runner, ctx context.Context) ([]Result, error) { return r.kill100Tool(ctx, "unshare") },
	}},
	{"fork-0", map[string]caseFunc{
		"jail": func(r *runner, ctx context.Context) ([]Result, error) { return r.forkJail(ctx, 0) },
	}},
	{"fork-50M", map[string]caseFunc{
		"jail": func(r *runner, ctx context.Context) ([]Result, error) { return r.forkJail(ctx, 50<<20) },
	}},
	{"memory", map[string]caseFunc{
		"jail":    (*runner).memoryJail,
		"bwrap":   func(r *runner, ctx context.Context) ([]Result, error) { return r.memoryTool(ctx, "bwrap") },
		"unshare": func(r *runner, ctx context.Context) ([]Result, error) { return r.memoryTool(ctx, "unshare") },
	}},
}

// CaseNames names the cases, in order.
func CaseNames() []string {
	var out []string
	for _, c := range cases {
		out = append(out, c.name)
	}
	return out
}

// errSkip marks a system this host cannot run: the report lists it as
// skipped, not as a failure.
var errSkip = errors.New("skipped")

// runner holds a run's state.
type runner struct {
	cfg     Config
	dir     string // the run's scratch directory
	ws, tmp string // a sandbox's /workspace and /tmp for the cases that need no node
	n       int    // sandboxes started, for unique names
}

// Run runs the selected cases on the selected systems and returns the
// report. A system that cannot run here is skipped; any other failure
// ends the run.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Rounds <= 0 {
		cfg.Rounds = 20
	}
	if cfg.Scratch == "" {
		cfg.Scratch = os.TempDir()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	for _, c := range cfg.Cases {
		if !slices.Contains(CaseNames(), c) {
			return nil, fmt.Errorf("%w: unknown case %q (cases: %s)", api.ErrBadRequest, c, strings.Join(CaseNames(), ", "))
		}
	}
	for _, s := range cfg.Systems {
		if !slices.Contains(Systems, s) {
			return nil, fmt.Errorf("%w: unknown system %q (systems: %s)", api.ErrBadRequest, s, strings.Join(Systems, ", "))
		}
	}
	dir, err := os.MkdirTemp(cfg.Scratch, "sandboxbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	r := &runner{cfg: cfg, dir: dir, ws: filepath.Join(dir, "ws"), tmp: filepath.Join(dir, "tmp")}
	for _, d := range []string{r.ws, r.tmp} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	rep := &Report{Rounds: cfg.Rounds, Kernel: kernel(), CPUs: runtime.NumCPU(), LoadBefore: loadavg()}
	for _, c := range cases {
		if len(cfg.Cases) > 0 && !slices.Contains(cfg.Cases, c.name) {
			continue
		}
		for _, sys := range Systems {
			f, ok := c.run[sys]
			if !ok || (len(cfg.Systems) > 0 && !slices.Contains(cfg.Systems, sys)) {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			cfg.Logger.Info("case", "case", c.name, "system", sys)
			res, err := f(r, ctx)
			if errors.Is(err, errSkip) {
				rep.Skipped = append(rep.Skipped, Skip{c.name, sys, strings.TrimSuffix(err.Error(), ": "+errSkip.Error())})
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("%s on %s: %w", c.name, sys, err)
			}
			for i := range res {
				res[i].Case, res[i].System = c.name, sys
			}
			rep.Results = append(rep.Results, res...)
		}
	}
	rep.LoadAfter = loadavg()
	return rep, nil
}

// ms is a duration in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// median of ds as a result in ms.
func medianMS(metric string, ds []time.Duration) Result {
	s := slices.Clone(ds)
	slices.Sort(s)
	var v time.Duration
	if len(s) > 0 {
		v = s[len(s)/2]
	}
	return Result{Metric: metric, Value: ms(v), Unit: "ms", Rounds: len(ds)}
}

// manager returns a jail manager with spares spare inits (jail.Config),
// or errSkip where this process cannot run sandboxes.
func (r *runner) manager(ctx context.Context, spares int) (*jail.Manager, error) {
	if !jail.MainRan() {
		return nil, fmt.Errorf("this binary does not call jail.Main first: %w", errSkip)
	}
	r.n++
	m, err := jail.New(jail.Config{StateDir: filepath.Join(r.dir, fmt.Sprintf("jail-%d", r.n)), Label: fmt.Sprintf("bench-%d-%d", os.Getpid(), r.n), Spares: spares})
	if errors.Is(err, api.ErrUnavailable) {
		return nil, fmt.Errorf("%v: %w", err, errSkip)
	}
	if err != nil {
		return nil, err
	}
	if err := m.Warm(ctx); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// tool checks that a tool can run here (root for its namespaces).
func tool(name string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s's namespaces need root: %w", name, errSkip)
	}
	if _, err := exec.LookPath(name); err != nil {
		return fmt.Errorf("%s not installed: %w", name, errSkip)
	}
	return nil
}

// BwrapArgs runs argv in bubblewrap with the jail sandbox's namespaces
// (PID, network, UTS, IPC, mount) and binds: the host's /usr and /etc
// read-only, its /bin, /sbin and /lib* as symlinks or read-only binds,
// a fresh /proc and /dev, ws at /workspace and tmp at /tmp.
func BwrapArgs(ws, tmp string, argv ...string) []string {
	a := []string{"--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-ipc", "--die-with-parent"}
	for _, d := range []string{"/usr", "/etc"} {
		a = append(a, "--ro-bind", d, d)
	}
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"} {
		if t, err := os.Readlink(d); err == nil {
			a = append(a, "--symlink", t, d)
		} else if _, err := os.Stat(d); err == nil {
			a = append(a, "--ro-bind", d, d)
		}
	}
	a = append(a, "--proc", "/proc", "--dev", "/dev", "--bind", ws, "/workspace", "--bind", tmp, "/tmp", "--chdir", "/workspace", "--")
	return append(a, argv...)
}

// UnshareArgs runs argv under unshare(1) in new PID, mount, network, UTS
// and IPC namespaces with a fresh /proc.
func UnshareArgs(argv ...string) []string {
	return append([]string{"--pid", "--fork", "--mount", "--net", "--uts", "--ipc", "--mount-proc", "--kill-child", "--"}, argv...)
}

func (r *runner) toolArgs(name string, argv ...string) []string {
	if name == "bwrap" {
		return BwrapArgs(r.ws, r.tmp, argv...)
	}
	return UnshareArgs(argv...)
}

// firstByte reads one byte from rd.
func firstByte(rd io.Reader) error {
	var one [1]byte
	_, err := io.ReadFull(rd, one[:])
	return err
}

func (r *runner) startJail(ctx context.Context, spares int) ([]Result, error) {
	m, err := r.manager(ctx, spares)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var ds []time.Duration
	for i := range r.cfg.Rounds {
		if err := m.Warm(ctx); err != nil {
			return nil, err
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		sb, err := m.Start(ctx, jail.Spec{Name: "start" + strconv.Itoa(i), Workspace: r.ws, Tmp: r.tmp})
		if err != nil {
			pr.Close()
			pw.Close()
			return nil, err
		}
		p, err := sb.Start(jail.ExecSpec{Argv: []string{"echo", "hi"}, Stdout: pw})
		if err == nil {
			err = firstByte(pr)
		}
		ds = append(ds, time.Since(t0))
		if p != nil {
			p.Wait(ctx)
		}
		err = errors.Join(err, sb.Stop(ctx))
		pr.Close()
		pw.Close()
		if err != nil {
			return nil, err
		}
	}
	return []Result{medianMS("first byte of echo", ds)}, nil
}

func (r *runner) startTool(ctx context.Context, name string) ([]Result, error) {
	if err := tool(name); err != nil {
		return nil, err
	}
	var ds []time.Duration
	for range r.cfg.Rounds {
		cmd := exec.CommandContext(ctx, name, r.toolArgs(name, "echo", "hi")...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		err = firstByte(out)
		ds = append(ds, time.Since(t0))
		io.Copy(io.Discard, out)
		if err = errors.Join(err, cmd.Wait()); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	return []Result{medianMS("first byte of echo", ds)}, nil
}

func (r *runner) execJail(ctx context.Context) ([]Result, error) {
	m, err := r.manager(ctx, -1)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	sb, err := m.Start(ctx, jail.Spec{Name: "exec", Workspace: r.ws, Tmp: r.tmp})
	if err != nil {
		return nil, err
	}
	defer sb.Stop(ctx)
	var ds []time.Duration
	for range r.cfg.Rounds {
		t0 := time.Now()
		st, err := sb.Exec(ctx, jail.ExecSpec{Argv: []string{"/bin/true"}})
		if err != nil {
			return nil, err
		}
		if st.Code != 0 || st.Signal != 0 {
			return nil, fmt.Errorf("/bin/true: %s", st)
		}
		ds = append(ds, time.Since(t0))
	}
	return []Result{medianMS("round trip of true", ds)}, nil
}

// execNsenter: nsenter into the namespaces of a running unshare sandbox,
// the way to run a command in one without a resident server.
func (r *runner) execNsenter(ctx context.Context) ([]Result, error) {
	if err := tool("unshare"); err != nil {
		return nil, err
	}
	if err := tool("nsenter"); err != nil {
		return nil, err
	}
	cmd := exec.Command("unshare", UnshareArgs("sleep", "1000")...)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	init, err := nsInit(cmd.Process.Pid)
	if err != nil {
		return nil, err
	}
	var ds []time.Duration
	for range r.cfg.Rounds {
		t0 := time.Now()
		if out, err := exec.CommandContext(ctx, "nsenter", "-t", strconv.Itoa(init), "-p", "-m", "-n", "-u", "-i", "/bin/true").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("nsenter: %w: %s", err, out)
		}
		ds = append(ds, time.Since(t0))
	}
	return []Result{medianMS("round trip of true", ds)}, nil
}

func (r *runner) execHost(ctx context.Context) ([]Result, error) {
	var ds []time.Duration
	for range r.cfg.Rounds {
		t0 := time.Now()
		if err := exec.CommandContext(ctx, "/bin/true").Run(); err != nil {
			return nil, err
		}
		ds = append(ds, time.Since(t0))
	}
	return []Result{medianMS("round trip of true", ds)}, nil
}

// hundred starts 100 sleeping processes (the shell and 99 sleeps) and
// says ready.
const hundred = `for i in $(seq 99); do sleep 1000 & done; echo ready; wait`

func (r *runner) kill100Jail(ctx context.Context) ([]Result, error) {
	m, err := r.manager(ctx, 1)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var ds []time.Duration
	for i := range r.cfg.Rounds {
		sb, err := m.Start(ctx, jail.Spec{Name: "k" + strconv.Itoa(i), Workspace: r.ws, Tmp: r.tmp})
		if err != nil {
			return nil, err
		}
		pr, pw, err := os.Pipe()
		if err != nil {
			sb.Stop(ctx)
			return nil, err
		}
		_, err = sb.Start(jail.ExecSpec{Argv: []string{"sh", "-c", hundred}, Stdout: pw})
		if err == nil {
			err = firstByte(pr)
		}
		if err == nil {
			if n, perr := sb.PidCount(); perr != nil || n < 100 {
				err = fmt.Errorf("%d processes in the sandbox (%v), want 100", n, perr)
			}
		}
		t0 := time.Now()
		err = errors.Join(err, sb.Stop(ctx))
		ds = append(ds, time.Since(t0))
		pr.Close()
		pw.Close()
		if err != nil {
			return nil, err
		}
	}
	return []Result{medianMS("kill until gone", ds)}, nil
}

// kill100Tool: SIGKILL of the namespace's init until the tool, which
// waits for the namespace to empty, has exited.
func (r *runner) kill100Tool(ctx context.Context, name string) ([]Result, error) {
	if err := tool(name); err != nil {
		return nil, err
	}
	var ds []time.Duration
	for range r.cfg.Rounds {
		cmd := exec.Command(name, r.toolArgs(name, "sh", "-c", hundred)...)
		out, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		bufio.NewReader(out).ReadString('\n')
		init, err := nsInit(cmd.Process.Pid)
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			return nil, err
		}
		t0 := time.Now()
		syscall.Kill(init, syscall.SIGKILL)
		cmd.Wait()
		ds = append(ds, time.Since(t0))
	}
	return []Result{medianMS("kill until gone", ds)}, nil
}

// nsInit finds the PID namespace's init a tool forked: its only child
// once that has entered a PID namespace of its own.
func nsInit(tool int) (int, error) {
	self, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", tool))
	for range 1000 {
		c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", tool, tool))
		if f := strings.Fields(string(c)); len(f) > 0 {
			pid, _ := strconv.Atoi(f[0])
			if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err == nil && ns != self {
				return pid, nil
			}
		}
		time.Sleep(time.Millisecond)
	}
	return 0, fmt.Errorf("no namespace init below pid %d", tool)
}

// forkJail: Backend.Fork of a live jail node whose shell loop writes its
// /tmp, into one child, over the real files layer (a store over a base,
// FUSE-mounted): size bytes in the base (the source's /workspace) and in
// the source's /tmp.
func (r *runner) forkJail(ctx context.Context, size int64) (_ []Result, err error) {
	if !jail.MainRan() {
		return nil, fmt.Errorf("this binary does not call jail.Main first: %w", errSkip)
	}
	if err := jailbackend.Available(); err != nil {
		return nil, fmt.Errorf("%v: %w", err, errSkip)
	}
	r.n++
	dir := filepath.Join(r.dir, fmt.Sprintf("fork-%d", r.n))
	base, home, files, bdir := filepath.Join(dir, "base"), filepath.Join(dir, "home"), filepath.Join(dir, "files"), filepath.Join(dir, "backend")
	for _, d := range []string{base, home, files, bdir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := os.WriteFile(filepath.Join(base, "big"), make([]byte, size), 0o644); err != nil {
		return nil, err
	}
	wm, err := workspace.New(workspace.Config{Home: home})
	if err != nil {
		return nil, err
	}
	tf, err := wm.OpenTreeFiles(ctx, files, base)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, tf.Close()) }()
	be, err := jailbackend.Open(jailbackend.Config{})(ctx, engine.BackendConfig{Tree: fmt.Sprintf("bench%d", r.n), Dir: bdir, Base: base})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, be.Close()) }()
	src, err := tf.Path(engine.MainBranch)
	if err != nil {
		return nil, err
	}
	if err := be.Start(ctx, "src", src); err != nil {
		return nil, err
	}
	fill := fmt.Sprintf("head -c %d /dev/urandom > /tmp/big && cat /workspace/big /tmp/big | wc -c", size)
	var got strings.Builder
	x, err := be.Exec(ctx, "src", engine.Command{Argv: []string{"sh", "-c", fill}}, func(o api.ExecOutput) error { got.Write(o.Data); return nil })
	if err != nil || x.ExitCode != 0 {
		return nil, fmt.Errorf("fill the source: %+v %v", x, err)
	}
	if n, _ := strconv.ParseInt(strings.TrimSpace(got.String()), 10, 64); n != 2*size {
		return nil, fmt.Errorf("the source holds %q bytes, want %d", got.String(), 2*size)
	}
	loop, stop := context.WithCancel(ctx)
	loopDone := make(chan struct{})
	go func() {
		defer close(loopDone)
		be.Exec(loop, "src", engine.Command{Argv: []string{"sh", "-c", "while :; do echo x > /tmp/x; done"}}, func(api.ExecOutput) error { return nil })
	}()
	defer func() { stop(); <-loopDone }()
	var pause, whole []time.Duration
	for i := range r.cfg.Rounds {
		child := "c" + strconv.Itoa(i)
		t0 := time.Now()
		err := be.Fork(ctx, "src", []string{child}, func(ctx context.Context) ([]string, error) {
			if err := tf.Fork(ctx, engine.MainBranch, []string{child}); err != nil {
				return nil, err
			}
			p, err := tf.Path(child)
			return []string{p}, err
		})
		if err != nil {
			return nil, err
		}
		whole = append(whole, time.Since(t0))
		ft, ok := be.(engine.ForkTimer)
		if !ok || ft.LastFork().Pause <= 0 {
			return nil, errors.New("the jail backend reports no pause")
		}
		pause = append(pause, ft.LastFork().Pause)
		if i == 0 {
			var out strings.Builder
			x, err := be.Exec(ctx, child, engine.Command{Argv: []string{"sh", "-c", "cat /workspace/big /tmp/big | wc -c"}}, func(o api.ExecOutput) error { out.Write(o.Data); return nil })
			if err != nil || x.ExitCode != 0 || strings.TrimSpace(out.String()) != strconv.FormatInt(2*size, 10) {
				return nil, fmt.Errorf("the child sees %q bytes (%+v %v), want %d", out.String(), x, err, 2*size)
			}
		}
		if err := be.Stop(ctx, child); err != nil {
			return nil, err
		}
		if err := tf.Abort(ctx, child); err != nil {
			return nil, err
		}
	}
	return []Result{medianMS("source's pause", pause), medianMS("fork incl. child's start", whole)}, nil
}

// idle is how many idle sandboxes the memory case averages over.
const idle = 8

func (r *runner) memoryJail(ctx context.Context) ([]Result, error) {
	m, err := r.manager(ctx, -1)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var pids []int
	var charged int64
	for i := range idle {
		sb, err := m.Start(ctx, jail.Spec{Name: "idle" + strconv.Itoa(i), Workspace: r.ws, Tmp: r.tmp})
		if err != nil {
			return nil, err
		}
		pids = append(pids, sb.InitPid())
	}
	time.Sleep(200 * time.Millisecond)
	for _, name := range m.Sandboxes() {
		sb, _ := m.Get(name)
		n, err := sb.MemoryBytes()
		if err != nil {
			return nil, err
		}
		charged += n
	}
	res, err := memory(pids)
	if err != nil {
		return nil, err
	}
	return append(res, Result{Metric: "cgroup charge", Value: float64(charged) / idle / 1024, Unit: "KiB", Rounds: 1}), nil
}

func (r *runner) memoryTool(ctx context.Context, name string) ([]Result, error) {
	if err := tool(name); err != nil {
		return nil, err
	}
	var cmds []*exec.Cmd
	defer func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}()
	var pids []int
	for range idle {
		cmd := exec.Command(name, r.toolArgs(name, "sleep", "1000")...)
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		cmds = append(cmds, cmd)
		if _, err := nsInit(cmd.Process.Pid); err != nil {
			return nil, err
		}
	}
	time.Sleep(200 * time.Millisecond)
	for _, c := range cmds {
		pids = append(pids, descendants(c.Process.Pid)...)
	}
	return memory(pids)
}

// memory sums the RSS, PSS and anonymous memory of pids, per idle
// sandbox. Anonymous memory is each process's own (heap, stacks, data
// written); the rest of RSS is file pages shared with every process that
// maps the same program, which PSS divides among them.
func memory(pids []int) ([]Result, error) {
	var sum Smaps
	for _, pid := range pids {
		m, err := SmapsRollup(pid)
		if err != nil {
			return nil, err
		}
		sum.RSS += m.RSS
		sum.PSS += m.PSS
		sum.Anon += m.Anon
	}
	return []Result{
		{Metric: "RSS", Value: float64(sum.RSS) / idle / 1024, Unit: "KiB", Rounds: 1},
		{Metric: "PSS", Value: float64(sum.PSS) / idle / 1024, Unit: "KiB", Rounds: 1},
		{Metric: "anonymous", Value: float64(sum.Anon) / idle / 1024, Unit: "KiB", Rounds: 1},
	}, nil
}

func descendants(pid int) []int {
	out := []int{pid}
	c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(c)) {
		child, _ := strconv.Atoi(f)
		out = append(out, descendants(child)...)
	}
	return out
}

// Smaps is a process's memory as /proc/PID/smaps_rollup counts it, in
// bytes.
type Smaps struct {
	RSS, PSS, Anon int64
}

// SmapsRollup reads a process's smaps_rollup.
func SmapsRollup(pid int) (Smaps, error) {
	var m Smaps
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return m, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "Rss:":
			m.RSS = v << 10
		case "Pss:":
			m.PSS = v << 10
		case "Anonymous:":
			m.Anon = v << 10
		}
	}
	return m, nil
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func kernel() string {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return ""
	}
	var b []byte
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}
