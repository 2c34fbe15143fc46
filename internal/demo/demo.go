package demo

import (
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/api"
)

//go:embed scripts/*.sh
var scripts embed.FS

// Doer sends one request to the daemon and returns its reply. The Go client
// satisfies it; tests use a double that copies directories.
type Doer interface {
	Do(ctx context.Context, req api.Request) (api.Response, error)
}

// Execer runs a command in a node and streams its output: the Go client's
// Exec. A Client that is one lets the demo run its agents in the nodes'
// sandboxes (backend jail).
type Execer interface {
	Exec(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (api.ExecExit, error)
}

// Backends the demo runs on (Config.Backend).
const (
	BackendDir  = "dir"
	BackendJail = "jail"
	BackendVM   = "vm"
)

// workDir is where the agents work in a sandbox: the seed's /tmp/workspace,
// in the node's /tmp, which the node's fork carries as it carries the files.
const workDir = "/tmp/workspace"

// ErrCheck is returned (wrapped, with the Summary) when a run's evidence is
// not what the demo demonstrates: the run completed, but a claim failed.
var ErrCheck = errors.New("demo check failed")

// Defaults of Config's zero fields.
const (
	DefaultVendoredBytes = 50 << 20 // forkd's 50 MiB vendored.bin
	DefaultAgentTimeout  = 60 * time.Second
	DefaultPython        = "python3"
)

// The demo's agents, in report order, and the script each one runs.
const (
	Source  = "source"
	Minimal = "minimal"
	Rewrite = "rewrite"
	Skip    = "skip"
)

// Steps of the demo, as Check.Step names them.
const (
	stepFork   = "fork"
	stepCommit = "commit"
)

var (
	agents     = []string{Source, Minimal, Rewrite, Skip}
	strategies = []string{Minimal, Rewrite, Skip}
)

// Config configures one run of the coding-agent demo. Its zero value, with a
// Client, is a valid configuration.
type Config struct {
	// Client drives the daemon; required.
	Client Doer
	// Workdir holds the tree's base directory (bases/<UTC time, e.g. 2026-12-01T18-05-12Z>/) and the
	// results (results/<UTC time, e.g. 2026-12-01T18-05-12Z>/). Default: the current directory.
	Workdir string
	// Out receives the printed summary. Default: discarded.
	Out io.Writer
	// Python is the interpreter the agents run on dir, a name on PATH or a
	// path (it must exist on the host either way). In a sandbox they run
	// its root's python3. Default: python3.
	Python string
	// VendoredBytes is the size of build-artifacts/vendored.bin.
	// Default: DefaultVendoredBytes.
	VendoredBytes int64
	// AgentTimeout bounds each agent script. Default: DefaultAgentTimeout.
	AgentTimeout time.Duration
	// KeepTree leaves the tree in the daemon for inspection instead of
	// deleting it (and its disk) at the end.
	KeepTree bool
	// Backend is the tree's backend: BackendJail runs each agent in its
	// node's sandbox, in /tmp/workspace, through exec; BackendVM likewise
	// in its node's microVM, /tmp/workspace in the guest's tmpfs (in
	// memory, carried by the fork with the VM's RAM); BackendDir runs the
	// agents as host processes in the nodes' files. Default: jail when the
	// Client can exec and the daemon serves jail trees (root with cgroups),
	// else dir, said in one line.
	Backend string
}

func (c Config) withDefaults() (Config, error) {
	if c.Client == nil {
		return c, api.Errorf(api.ErrBadRequest, "demo: Config.Client is nil")
	}
	if c.Workdir == "" {
		c.Workdir = "."
	}
	wd, err := filepath.Abs(c.Workdir)
	if err != nil {
		return c, fmt.Errorf("demo: workdir: %w", err)
	}
	c.Workdir = wd
	if c.Out == nil {
		c.Out = io.Discard
	}
	if c.Python == "" {
		c.Python = DefaultPython
	}
	py, err := exec.LookPath(c.Python)
	if err != nil {
		return c, fmt.Errorf("demo: python interpreter: %w", err)
	}
	if c.Python, err = filepath.Abs(py); err != nil {
		return c, fmt.Errorf("demo: python interpreter: %w", err)
	}
	if c.VendoredBytes == 0 {
		c.VendoredBytes = DefaultVendoredBytes
	}
	if c.VendoredBytes < 0 {
		return c, api.Errorf(api.ErrBadRequest, "demo: VendoredBytes %d < 0", c.VendoredBytes)
	}
	if c.AgentTimeout == 0 {
		c.AgentTimeout = DefaultAgentTimeout
	}
	if c.AgentTimeout < 0 {
		return c, api.Errorf(api.ErrBadRequest, "demo: AgentTimeout %v < 0", c.AgentTimeout)
	}
	switch c.Backend {
	case "", BackendDir:
	case BackendJail, BackendVM:
		if _, ok := c.Client.(Execer); !ok {
			return c, api.Errorf(api.ErrBadRequest, "demo: backend %s needs a Client that can exec", c.Backend)
		}
	default:
		return c, api.Errorf(api.ErrBadRequest, "demo: backend %q (want %s, %s or %s)", c.Backend, BackendDir, BackendJail, BackendVM)
	}
	return c, nil
}

// Summary is what a run found. It is also summary.json, with forkd's fields
// renamed to Arbor's vocabulary (branch_tag -> tree_id, daemon_pause_ms ->
// daemon_fork_ms, sandbox_id -> node_id).
type Summary struct {
	TreeID string `json:"tree_id"`
	// Backend is the tree's backend; BackendNote says why it is dir when
	// the demo chose (sandboxes were not possible).
	Backend     string `json:"backend"`
	BackendNote string `json:"backend_note,omitempty"`
	// SourcePauseNS is how long the fork_batch held the running source
	// paused, and SandboxStartNS each agent's sandbox start (jail).
	SourcePauseNS  int64            `json:"source_pause_ns,omitempty"`
	SandboxStartNS map[string]int64 `json:"sandbox_start_ns,omitempty"`
	// FirstReplyNS is, per child, the time from the client's fork_batch
	// call to the first output of an exec in the child (in a sandbox or
	// VM); RAMBytes each agent's RAM right after (tree_nodes: PSS on vm).
	FirstReplyNS map[string]int64  `json:"first_reply_ns,omitempty"`
	RAMBytes     map[string]int64  `json:"ram_bytes_after_fork,omitempty"`
	SourceID     string            `json:"source_id"`
	ChildIDs     map[string]string `json:"child_ids"` // label -> node id
	// The daemon-measured latency of the one tree_fork_batch of the three
	// children, and the client's round trip around it.
	ForkLatencyNS   int64   `json:"daemon_fork_latency_ns"`
	ForkLatencyMS   float64 `json:"daemon_fork_ms"`
	ForkRoundTripNS int64   `json:"client_fork_round_trip_ns"`
	VendoredBytes   int64   `json:"vendored_bytes"`

	StateEvidence map[string]Evidence `json:"state_evidence"` // by agent label
	TestOutcomes  map[string]string   `json:"test_outcomes"`  // label -> Outcome.Label
	Tests         map[string]Outcome  `json:"test_results"`   // label -> parsed outcome
	InitPy        map[string]string   `json:"init_py"`        // label -> final mathy/__init__.py
	Checks        []Check             `json:"checks"`
	Commit        *Commit             `json:"commit,omitempty"`
	ResultsDir    string              `json:"results_dir"`
}

// Evidence is the state sampled in one agent's workspace.
type Evidence struct {
	NodeID string `json:"node_id"`
	// PycacheMD5AtFork is sampled right after the fork, before the agent ran;
	// PycacheMD5 after it ran. For the source both are taken around the
	// children's runs, which must not touch it.
	PycacheMD5AtFork string `json:"pycache_md5_at_fork"`
	PycacheMD5       string `json:"pycache_md5"`
	PycacheFiles     int    `json:"pycache_files"`
	VendoredMD5      string `json:"vendored_md5"`
	VendoredSize     int64  `json:"vendored_size"`
}

// Check is one claim of the demo and whether this run bore it out.
type Check struct {
	Step   string `json:"step"` // "fork" (forkd's claims) or "commit"
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// Commit is the step forkd's demo cannot take: the winner becomes the
// source's state.
type Commit struct {
	Label  string `json:"label"`
	NodeID string `json:"node_id"`
	// Rule says how the winner was chosen; DiffLines is every child's line
	// diff of the workspace's Python sources against the fork point.
	Rule      string         `json:"rule"`
	DiffLines map[string]int `json:"diff_lines"`
	LatencyNS int64          `json:"daemon_latency_ns,omitempty"`
	// Stale is tree_commit's reply; States is every agent's state in
	// tree_nodes afterwards ("absent" if tree_nodes no longer lists it).
	Stale         []string          `json:"stale"`
	States        map[string]string `json:"states"`
	SourceInitPy  string            `json:"source_init_py"`
	SourceOutcome Outcome           `json:"source_outcome"`
}

// CodingAgent runs the coding-agent-fork demo (see the package doc) and
// writes its results under cfg.Workdir/results/<UTC time, e.g. 2026-12-01T18-05-12Z>/. If the run
// completes but a claim fails, it returns the Summary and an error wrapping
// ErrCheck.
func CodingAgent(ctx context.Context, cfg Config) (Summary, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Summary{}, err
	}
	r := &run{cfg: cfg, ids: map[string]string{}, paths: map[string]string{}}
	return r.do(ctx)
}

// run is one demo run; it is used by one goroutine except where runAgents
// fans out, which only reads it.
type run struct {
	cfg     Config
	exec    Execer // set: the agents run in sandboxes
	scratch string // where a sandbox's workspace is copied to be read
	looks   int    // copies made
	treeID  string
	ids     map[string]string // label -> node id
	paths   map[string]string // label -> node path on the host
	diffs   map[string]int    // child label -> DiffLines against the fork point
	sum     Summary
}

func (r *run) do(ctx context.Context) (_ Summary, err error) {
	dir, name, err := makeUnique(filepath.Join(r.cfg.Workdir, "results"), time.Now().UTC().Format("2006-01-02T15-04-05Z"))
	if err != nil {
		return Summary{}, fmt.Errorf("demo: results dir: %w", err)
	}
	r.sum.ResultsDir = dir
	base := filepath.Join(r.cfg.Workdir, "bases", name)
	if err := os.MkdirAll(base, 0o755); err != nil {
		return r.sum, fmt.Errorf("demo: base dir: %w", err)
	}

	resp, err := r.create(ctx, base)
	if err != nil {
		return r.sum, err
	}
	if r.exec != nil {
		if r.scratch, err = os.MkdirTemp("", "arbor-demo-"); err != nil {
			return r.sum, fmt.Errorf("demo: %w", err)
		}
		defer os.RemoveAll(r.scratch)
	}
	if resp.TreeID == "" || resp.Root == "" {
		return r.sum, fmt.Errorf("demo: tree_create: reply without tree_id or root: %w", api.ErrInternal)
	}
	r.treeID, r.sum.TreeID = resp.TreeID, resp.TreeID
	defer func() {
		if r.cfg.KeepTree {
			fmt.Fprintf(r.cfg.Out, "\nkept tree %s (arbor tree delete removes it and its disk)\n", r.treeID)
			return
		}
		// The delete (the tree and its disk) must run even when ctx is done;
		// bound it on its own.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, derr := r.call(dctx, api.Request{Op: api.OpTreeDelete, TreeID: r.treeID}); derr != nil {
			err = errors.Join(err, derr)
			return
		}
		// The base stays empty (nothing is committed into the root); remove
		// it only if so, never what someone else put there.
		_ = os.Remove(base)
		_ = os.Remove(filepath.Dir(base))
	}()

	if err := r.setup(ctx, resp.Root); err != nil {
		return r.sum, err
	}
	if err := r.report(); err != nil {
		return r.sum, err
	}
	if err := r.commit(ctx); err != nil {
		return r.sum, err
	}
	if err := r.report(); err != nil {
		return r.sum, err
	}
	fmt.Fprintf(r.cfg.Out, "\n%s\nresults: %s\n", r.sum.commitMarkdown(), r.sum.ResultsDir)
	var failed []string
	for _, c := range r.sum.Checks {
		if !c.OK {
			failed = append(failed, c.Name)
		}
	}
	if len(failed) > 0 {
		return r.sum, fmt.Errorf("demo: %s: %w", strings.Join(failed, "; "), ErrCheck)
	}
	return r.sum, nil
}

// create makes the tree on the backend Config.Backend names or, by
// default, on jail if the client can exec and the daemon serves it, else
// on dir (saying why in one line).
func (r *run) create(ctx context.Context, base string) (api.Response, error) {
	ex, canExec := r.cfg.Client.(Execer)
	backend := r.cfg.Backend
	if backend == "" && canExec {
		resp, err := r.call(ctx, api.Request{Op: api.OpTreeCreate, Base: base, Backend: BackendJail})
		if err == nil {
			r.exec, r.sum.Backend = ex, BackendJail
			return resp, nil
		}
		if !errors.Is(err, api.ErrBadRequest) { // the daemon serves no jail trees: anything else is a failure
			return resp, err
		}
		r.sum.BackendNote = fmt.Sprintf("sandboxes not possible here (%v)", err)
	} else if backend == "" {
		r.sum.BackendNote = "sandboxes not possible with this client (it cannot exec)"
	}
	if backend == "" {
		backend = BackendDir
		fmt.Fprintf(r.cfg.Out, "demo: %s: the agents run as host processes on the dir backend\n", r.sum.BackendNote)
	}
	resp, err := r.call(ctx, api.Request{Op: api.OpTreeCreate, Base: base, Backend: backend})
	if err == nil {
		r.sum.Backend = backend
		if backend == BackendJail || backend == BackendVM {
			r.exec = ex
		}
	}
	return resp, err
}

// setup is forkd's recipe up to the evidence: source, fork batch, strategies.
func (r *run) setup(ctx context.Context, root string) error {
	src, err := r.fork1(ctx, root, Source)
	if err != nil {
		return err
	}
	r.ids[Source], r.paths[Source] = src.NodeID, src.Path
	r.sum.SourceID = src.NodeID
	if r.exec != nil {
		r.sum.SandboxStartNS = map[string]int64{Source: src.StartNS}
	}
	if err := r.agent(ctx, Source, "setup-source.sh", nil); err != nil {
		return err
	}
	srcRoot, err := r.look(ctx, Source)
	if err != nil {
		return err
	}
	srcAtFork, err := r.sample(ctx, Source, srcRoot)
	if err != nil {
		return fmt.Errorf("demo: sample source: %w", err)
	}
	forkPoint, err := pySources(srcRoot)
	if err != nil {
		return fmt.Errorf("demo: source files: %w", err)
	}
	// A child's edit must not land in the same mtime second as the .pyc it
	// invalidates (see the package doc).
	if err := waitPastSecond(ctx, latestMtime(srcRoot, forkPoint)); err != nil {
		return err
	}

	start := time.Now()
	resp, err := r.call(ctx, api.Request{Op: api.OpTreeForkBatch, TreeID: r.treeID, SourceID: src.NodeID, Labels: strategies})
	r.sum.ForkRoundTripNS = time.Since(start).Nanoseconds()
	if err != nil {
		return err
	}
	r.sum.ForkLatencyNS = resp.LatencyNS
	r.sum.ForkLatencyMS = float64(resp.LatencyNS) / 1e6
	r.sum.SourcePauseNS = resp.PauseNS
	if err := r.writeJSON("fork-batch.json", resp); err != nil {
		return err
	}
	if len(resp.Forks) != len(strategies) {
		return fmt.Errorf("demo: tree_fork_batch: %d forks for %d labels: %w", len(resp.Forks), len(strategies), api.ErrInternal)
	}
	r.sum.ChildIDs = map[string]string{}
	for i, f := range resp.Forks {
		label := strategies[i]
		if f.Label != "" {
			label = f.Label
		}
		if _, ok := r.sum.ChildIDs[label]; ok || !contains(strategies, label) {
			return fmt.Errorf("demo: tree_fork_batch: unexpected fork label %q: %w", label, api.ErrInternal)
		}
		if f.Path == "" {
			if f.Path, err = r.nodePath(ctx, f.NodeID); err != nil {
				return err
			}
		}
		r.ids[label], r.paths[label], r.sum.ChildIDs[label] = f.NodeID, f.Path, f.NodeID
		if r.exec != nil {
			r.sum.SandboxStartNS[label] = f.StartNS
		}
	}
	if r.exec != nil {
		if err := r.firstReplies(ctx, start); err != nil {
			return err
		}
	}

	ev := map[string]Evidence{}
	for _, label := range strategies {
		root, err := r.look(ctx, label)
		if err != nil {
			return err
		}
		pc, _, err := pycacheMD5(root)
		if err != nil {
			return fmt.Errorf("demo: sample %s at fork: %w", label, err)
		}
		ev[label] = Evidence{NodeID: r.ids[label], PycacheMD5AtFork: pc}
	}
	ev[Source] = Evidence{NodeID: src.NodeID, PycacheMD5AtFork: srcAtFork.pycache}

	if err := r.runStrategies(ctx); err != nil {
		return err
	}

	r.sum.Tests, r.sum.TestOutcomes, r.sum.InitPy = map[string]Outcome{}, map[string]string{}, map[string]string{}
	diffs := map[string]int{}
	var lines []string
	for _, label := range agents {
		root, err := r.look(ctx, label)
		if err != nil {
			return err
		}
		s, err := r.sample(ctx, label, root)
		if err != nil {
			return fmt.Errorf("demo: sample %s: %w", label, err)
		}
		e := ev[label]
		e.PycacheMD5, e.PycacheFiles, e.VendoredMD5, e.VendoredSize = s.pycache, s.pycacheFiles, s.vendoredMD5, s.vendoredSize
		ev[label] = e
		log, err := os.ReadFile(filepath.Join(root, ".agent-log"))
		if err != nil {
			return fmt.Errorf("demo: %s log: %w", label, err)
		}
		o := ParseOutcome(string(log))
		r.sum.Tests[label], r.sum.TestOutcomes[label], r.sum.InitPy[label] = o, o.Label, s.initPy
		if err := r.writeFile(label+"-init-py.txt", []byte(s.initPy)); err != nil {
			return err
		}
		if err := r.writeFile(label+"-agent.log", log); err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%s %s %s %s %d", label, e.NodeID, e.PycacheMD5, e.VendoredMD5, e.VendoredSize))
		if label != Source {
			files, err := pySources(root)
			if err != nil {
				return fmt.Errorf("demo: %s files: %w", label, err)
			}
			diffs[label] = DiffLines(forkPoint, files)
		}
	}
	r.sum.StateEvidence = ev
	r.sum.VendoredBytes = r.cfg.VendoredBytes
	r.diffs = diffs
	if err := r.writeFile("state-evidence.txt", []byte(strings.Join(lines, "\n")+"\n")); err != nil {
		return err
	}
	r.sum.Checks = r.sum.forkChecks(srcAtFork.initPy)
	fmt.Fprint(r.cfg.Out, r.sum.forkMarkdown())
	return nil
}

// firstReplies measures, for each child at once, the time from the fork
// call at start to the first output of an exec in it, then every agent's
// RAM as tree_nodes reports it.
func (r *run) firstReplies(ctx context.Context, start time.Time) error {
	got := make([]time.Duration, len(strategies))
	errs := make([]error, len(strategies))
	var wg sync.WaitGroup
	for i, label := range strategies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := writerFunc(func(p []byte) (int, error) {
				if got[i] == 0 {
					got[i] = time.Since(start)
				}
				return len(p), nil
			})
			errs[i] = r.runIn(ctx, label, []string{"echo", "ready"}, nil, w, w)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("demo: first exec in the children: %w", err)
	}
	r.sum.FirstReplyNS = map[string]int64{}
	for i, label := range strategies {
		r.sum.FirstReplyNS[label] = got[i].Nanoseconds()
	}
	nodes, err := r.call(ctx, api.Request{Op: api.OpTreeNodes, TreeID: r.treeID})
	if err != nil {
		return err
	}
	r.sum.RAMBytes = map[string]int64{}
	for _, n := range nodes.Nodes {
		for _, label := range agents {
			if r.ids[label] == n.ID {
				r.sum.RAMBytes[label] = n.RAMBytes
			}
		}
	}
	return nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// runStrategies runs the three children's scripts at once: their files are
// independent, which is the point.
func (r *run) runStrategies(ctx context.Context) error {
	errs := make([]error, len(strategies))
	var wg sync.WaitGroup
	for i, label := range strategies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = r.agent(ctx, label, label+".sh", nil)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// commit picks the winner, commits it into the source, and re-tests there.
func (r *run) commit(ctx context.Context) error {
	c := &Commit{DiffLines: r.diffs}
	r.sum.Commit = c
	c.Rule = "the passing child (last unittest line OK, nothing skipped) with the smallest line diff of its Python sources against the fork point; ties go to the earlier of minimal, rewrite, skip"
	for _, label := range strategies {
		if !r.sum.Tests[label].Passed {
			continue
		}
		if c.Label == "" || c.DiffLines[label] < c.DiffLines[c.Label] {
			c.Label = label
		}
	}
	if c.Label == "" {
		r.sum.Checks = append(r.sum.Checks, Check{Step: stepCommit, Name: "a child passed", Detail: "no child passed its tests; nothing to commit"})
		return nil
	}
	c.NodeID = r.ids[c.Label]
	resp, err := r.call(ctx, api.Request{Op: api.OpTreeCommit, TreeID: r.treeID, NodeID: c.NodeID})
	if err != nil {
		return err
	}
	c.Stale, c.LatencyNS = resp.Stale, resp.LatencyNS
	if c.Stale == nil {
		c.Stale = []string{}
	}
	if err := r.writeJSON("commit.json", resp); err != nil {
		return err
	}
	nodes, err := r.call(ctx, api.Request{Op: api.OpTreeNodes, TreeID: r.treeID})
	if err != nil {
		return err
	}
	if err := r.writeJSON("nodes-after-commit.json", nodes); err != nil {
		return err
	}
	c.States = map[string]string{}
	for _, label := range agents {
		c.States[label] = "absent"
		for _, n := range nodes.Nodes {
			if n.ID == r.ids[label] {
				c.States[label] = n.State
				if label == Source && n.Path != "" {
					r.paths[Source] = n.Path
				}
			}
		}
	}

	if err := r.agent(ctx, Source, "retest.sh", []string{"WINNER=" + c.Label}); err != nil {
		return err
	}
	srcRoot, err := r.look(ctx, Source)
	if err != nil {
		return err
	}
	initPy, err := os.ReadFile(filepath.Join(srcRoot, "mathy", "__init__.py"))
	if err != nil {
		return fmt.Errorf("demo: source after commit: %w", err)
	}
	log, err := os.ReadFile(filepath.Join(srcRoot, ".agent-log"))
	if err != nil {
		return fmt.Errorf("demo: source log after commit: %w", err)
	}
	c.SourceInitPy, c.SourceOutcome = string(initPy), ParseOutcome(string(log))
	if err := r.writeFile("source-after-commit-init-py.txt", initPy); err != nil {
		return err
	}
	if err := r.writeFile("source-after-commit-agent.log", log); err != nil {
		return err
	}
	r.sum.Checks = append(r.sum.Checks, r.sum.commitChecks()...)
	return nil
}

// fork1 makes one child of parent with tree_fork.
func (r *run) fork1(ctx context.Context, parent, label string) (api.Fork, error) {
	resp, err := r.call(ctx, api.Request{Op: api.OpTreeFork, TreeID: r.treeID, SourceID: parent, Label: label})
	if err != nil {
		return api.Fork{}, err
	}
	f := api.Fork{NodeID: resp.NodeID, Path: resp.Path, Label: label, LatencyNS: resp.LatencyNS}
	if len(resp.Forks) > 0 {
		f.StartNS = resp.Forks[0].StartNS
		if f.NodeID == "" {
			f.NodeID = resp.Forks[0].NodeID
		}
		if f.Path == "" {
			f.Path = resp.Forks[0].Path
		}
	}
	if f.NodeID == "" {
		return f, fmt.Errorf("demo: tree_fork %s: reply without node_id: %w", label, api.ErrInternal)
	}
	if f.Path == "" {
		if f.Path, err = r.nodePath(ctx, f.NodeID); err != nil {
			return f, err
		}
	}
	return f, nil
}

// nodePath asks tree_nodes where a live node's files are.
func (r *run) nodePath(ctx context.Context, id string) (string, error) {
	resp, err := r.call(ctx, api.Request{Op: api.OpTreeNodes, TreeID: r.treeID})
	if err != nil {
		return "", err
	}
	for _, n := range resp.Nodes {
		if n.ID == id && n.Path != "" {
			return n.Path, nil
		}
	}
	return "", fmt.Errorf("demo: node %s has no path: %w", id, api.ErrState)
}

// call sends req and turns an error reply into an error, for Doers that
// return one as a Response.
func (r *run) call(ctx context.Context, req api.Request) (api.Response, error) {
	resp, err := r.cfg.Client.Do(ctx, req)
	if err == nil && resp.Status == api.StatusError {
		err = &api.Error{Code: resp.Code, Message: resp.Message}
	}
	if err != nil {
		return resp, fmt.Errorf("demo: %s: %w", req.Op, err)
	}
	return resp, nil
}

// agent runs one embedded script in label's workspace: in its sandbox
// (agentIn), or as a host process in its files. The host process's group
// is killed on timeout so no python outlives the demo.
func (r *run) agent(ctx context.Context, label, script string, env []string) error {
	body, err := scripts.ReadFile("scripts/" + script)
	if err != nil {
		return fmt.Errorf("demo: script %s: %w", script, err)
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.AgentTimeout)
	defer cancel()
	if r.exec != nil {
		return r.agentIn(ctx, label, script, string(body), env)
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", string(body), script)
	cmd.Dir = r.paths[label]
	cmd.Env = append(agentEnv(os.Environ()),
		"PYTHON="+r.cfg.Python, "VENDORED_BYTES="+strconv.FormatInt(r.cfg.VendoredBytes, 10))
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return fmt.Errorf("demo: agent %s (%s in %s): %w: %s", label, script, cmd.Dir, err, strings.TrimSpace(lastBytes(out.Bytes(), 2000)))
	}
	return nil
}

// agentEnv is the caller's environment without what would hide __pycache__
// or override the demo's own variables.
func agentEnv(env []string) []string {
	drop := []string{"PYTHONDONTWRITEBYTECODE=", "PYTHONPYCACHEPREFIX=", "PYTHON=", "VENDORED_BYTES=", "WINNER="}
	out := make([]string, 0, len(env))
next:
	for _, kv := range env {
		for _, d := range drop {
			if strings.HasPrefix(kv, d) {
				continue next
			}
		}
		out = append(out, kv)
	}
	return out
}

func (r *run) writeFile(name string, b []byte) error {
	if err := os.WriteFile(filepath.Join(r.sum.ResultsDir, name), b, 0o644); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	return nil
}

func (r *run) writeJSON(name string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("demo: %s: %w", name, err)
	}
	return r.writeFile(name, append(b, '\n'))
}

// report writes summary.md and summary.json from the Summary so far.
func (r *run) report() error {
	if err := r.writeFile("summary.md", []byte(r.sum.Markdown())); err != nil {
		return err
	}
	return r.writeJSON("summary.json", r.sum)
}

// makeUnique creates parent/name, or parent/name-2, -3, ... if taken.
func makeUnique(parent, name string) (string, string, error) {
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", "", err
	}
	for i := 1; i <= 100; i++ {
		n := name
		if i > 1 {
			n = fmt.Sprintf("%s-%d", name, i)
		}
		dir := filepath.Join(parent, n)
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, n, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", "", err
		}
	}
	return "", "", fmt.Errorf("%s/%s: 100 runs in one second: %w", parent, name, os.ErrExist)
}

// waitPastSecond sleeps until the wall clock is in a later whole second than t.
func waitPastSecond(ctx context.Context, t time.Time) error {
	d := time.Until(t.Truncate(time.Second).Add(time.Second + 10*time.Millisecond))
	if d <= 0 {
		return nil
	}
	if d > 2*time.Second {
		d = 2 * time.Second // a clock in the future; don't wait on it forever
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
