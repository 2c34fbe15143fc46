package fsbench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/arbor-dev/arbor/api"
	"golang.org/x/sys/unix"
)

// System is one filesystem under test.
type System interface {
	// Name is the system's column in the report; unique in a run.
	Name() string
	// Setup builds the filesystem over base, a directory prepared by the
	// harness, and returns the directory to run cases in. scratch is an
	// empty directory on the disk under test that the system may use for
	// its own state (upper layers, stores); the harness removes it later.
	// Setup that fails must undo what it did. A Setup error that wraps
	// errors.ErrUnsupported skips the system with the error as the reason.
	Setup(ctx context.Context, base, scratch string) (root string, err error)
	// Teardown undoes Setup: unmounts every mount, stops every process.
	Teardown(ctx context.Context) error
}

// Brancher is implemented by systems that can create branches of their
// root; they are timed on the branch-create, commit and abort cases.
type Brancher interface {
	// Branch creates a new branch of the system's current state. The
	// harness times this call.
	Branch(ctx context.Context) (Branch, error)
}

// Branch is one branch made by a Brancher.
type Branch interface {
	// Root is the directory that shows the branch's files.
	Root() string
	// Commit makes the branch's changes its parent's and ends the branch.
	// It returns an error wrapping errors.ErrUnsupported when the system
	// cannot commit with these options; the case is then skipped.
	Commit(ctx context.Context, opts CommitOptions) error
	// Abort drops the branch and its changes.
	Abort(ctx context.Context) error
}

// CommitOptions selects the commit variant being timed.
type CommitOptions struct {
	// IntoBase commits into the real base directory (the branch's parent
	// is the base); otherwise into an in-store parent branch.
	IntoBase bool
	// Durable makes the commit crash-safe before Commit returns (fsync'd
	// journal and data); otherwise it only has to be visible.
	Durable bool
}

// ServiceTimer is implemented by systems whose branch operations are
// served by another process: LastService is how long the last Branch,
// Commit or Abort took where it ran, which the harness records instead of
// its own clock (that would add the pipe's round trip to every lap).
type ServiceTimer interface {
	LastService() time.Duration
}

// stopFor ends a lap of a branch operation of sys.
func (e *env) stopFor(sys System) {
	if st, ok := sys.(ServiceTimer); ok {
		e.sw.stopAs(st.LastService())
		return
	}
	e.sw.stop()
}

// CacheDropper is implemented by systems that hold caches of their own;
// cold cases call DropCaches after the kernel's caches were dropped.
type CacheDropper interface {
	DropCaches(ctx context.Context) error
}

// Config selects what Run measures. Its zero value means the defaults.
type Config struct {
	// Size is the size of the big files (sequential and random I/O);
	// default 1 GiB.
	Size int64
	// Files is the count of the metadata cases (stat, readdir, create,
	// open-read); default 10,000. Branch-create bases have 100, Files and
	// 10×Files files.
	Files int
	// Rounds is the number of timed rounds per case; the report gives the
	// median. Default 5.
	Rounds int
	// Cases are the case names to run (see CaseNames); default all.
	Cases []string
	// Systems are the system names to run, in order; default all given.
	Systems []string
	// Scratch is a directory on the disk under test; Run works in a new
	// directory inside it and removes that at the end. Default os.TempDir().
	Scratch string
	// GitFiles is the number of files in the git checkout; default 3,000.
	GitFiles int
	// GoModule is the directory of the Go module that go-build compiles
	// (copied into the base without .git). Default: the module containing
	// the working directory, if any, else a small generated module.
	GoModule string
	// GoCache is the GOCACHE for go-build; default `go env GOCACHE`.
	GoCache string
	// QuickCold makes cold cases evict only the big file from the page
	// cache (fadvise DONTNEED) instead of syncing and dropping every cache
	// of the machine, which takes seconds on a busy host. Cold metadata
	// cases then run with warm dentries. For quick tests, not for figures.
	QuickCold bool
	// Logger gets progress messages; nil means none.
	Logger *slog.Logger
}

const (
	defaultSize     = 1 << 30
	defaultFiles    = 10000
	defaultRounds   = 5
	defaultGitFiles = 3000
)

// Baseline is the name of the system every ratio is taken against.
const Baseline = "native"

func (c Config) withDefaults() (Config, error) {
	if c.Size == 0 {
		c.Size = defaultSize
	}
	if c.Files == 0 {
		c.Files = defaultFiles
	}
	if c.Rounds == 0 {
		c.Rounds = defaultRounds
	}
	if c.GitFiles == 0 {
		c.GitFiles = defaultGitFiles
	}
	if c.Scratch == "" {
		c.Scratch = os.TempDir()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	switch {
	case c.Size < 1<<20:
		return c, api.Errorf(api.ErrBadRequest, "fsbench: size %d is below 1 MiB", c.Size)
	case c.Files < 1:
		return c, api.Errorf(api.ErrBadRequest, "fsbench: files %d is below 1", c.Files)
	case c.Rounds < 1:
		return c, api.Errorf(api.ErrBadRequest, "fsbench: rounds %d is below 1", c.Rounds)
	case c.GitFiles < 1:
		return c, api.Errorf(api.ErrBadRequest, "fsbench: git files %d is below 1", c.GitFiles)
	}
	for _, name := range c.Cases {
		if caseByName(name) == nil {
			return c, api.Errorf(api.ErrBadRequest, "fsbench: unknown case %q (known: %s)", name, strings.Join(CaseNames(), ", "))
		}
	}
	return c, nil
}

// Run measures every selected case on every selected system and returns the
// report. A system that is unavailable (its Setup wraps
// errors.ErrUnsupported) is skipped with a note; any other failure of a
// system or a case ends the run with an error, after tearing down.
func Run(ctx context.Context, cfg Config, systems []System) (Report, error) {
	h, systems, cases, err := open(ctx, cfg, systems)
	if err != nil {
		return Report{}, err
	}
	defer h.close()
	// Case-major, each case on a freshly set-up system, with the order of
	// the systems rotated from case to case: the systems measure a case
	// within a short window of each other, so drifting background load on
	// a shared machine does not favour whichever system runs first.
	down := map[string]bool{} // systems found unavailable
	for ci, c := range cases {
		for k := range systems {
			s := systems[(ci+k)%len(systems)]
			if down[s.Name()] {
				continue
			}
			err := h.runOne(ctx, s, c)
			if errors.Is(err, errUnavailable) {
				down[s.Name()] = true
				continue
			}
			if err != nil {
				return *h.rep, err
			}
		}
	}
	h.rep.computeRatios()
	return *h.rep, nil
}

// open validates cfg, selects the systems and cases, and builds the bases
// in a new scratch directory; close removes it.
func open(ctx context.Context, cfg Config, systems []System) (*harness, []System, []*caseDef, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, nil, nil, err
	}
	systems, err = selectSystems(systems, cfg.Systems)
	if err != nil {
		return nil, nil, nil, err
	}
	cases := selectCases(cfg.Cases)

	if err := os.MkdirAll(cfg.Scratch, 0o755); err != nil {
		return nil, nil, nil, fmt.Errorf("fsbench: scratch: %w", err)
	}
	dir, err := os.MkdirTemp(cfg.Scratch, "fsbench-")
	if err != nil {
		return nil, nil, nil, fmt.Errorf("fsbench: scratch: %w", err)
	}
	h := &harness{cfg: cfg, dir: dir}
	if h.dir, err = filepath.EvalSymlinks(dir); err != nil {
		_ = os.Remove(dir)
		return nil, nil, nil, fmt.Errorf("fsbench: scratch: %w", err)
	}
	h.rep = &Report{Machine: probeMachine(h.dir), Size: cfg.Size, Files: cfg.Files, Rounds: cfg.Rounds}
	for _, s := range systems {
		h.rep.Systems = append(h.rep.Systems, s.Name())
	}
	for _, c := range cases {
		h.rep.Cases = append(h.rep.Cases, c.name)
	}
	start := time.Now()
	if err := h.prepareBase(ctx, cases, systems); err != nil {
		h.close()
		return nil, nil, nil, err
	}
	cfg.Logger.Info("base ready", "dir", h.base, "took", time.Since(start).Round(time.Millisecond))
	return h, systems, cases, nil
}

// close removes the scratch directory, detaching any mount left in it
// first (RemoveAll would otherwise recurse into it).
func (h *harness) close() {
	detachUnder(h.dir)
	_ = removeAll(h.dir)
}

func selectSystems(all []System, names []string) ([]System, error) {
	seen := map[string]bool{}
	for _, s := range all {
		if seen[s.Name()] {
			return nil, api.Errorf(api.ErrBadRequest, "fsbench: two systems named %q", s.Name())
		}
		seen[s.Name()] = true
	}
	if len(names) == 0 {
		return all, nil
	}
	var out []System
	for _, n := range names {
		i := slices.IndexFunc(all, func(s System) bool { return s.Name() == n })
		if i < 0 {
			known := make([]string, 0, len(all))
			for _, s := range all {
				known = append(known, s.Name())
			}
			return nil, api.Errorf(api.ErrBadRequest, "fsbench: unknown system %q (known: %s)", n, strings.Join(known, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

type harness struct {
	cfg  Config
	dir  string // the run's scratch directory
	base string // the main base
	// branchBases maps a file count to its base directory.
	branchBases map[int]string
	goModPath   string // module path of base/gomod
	goBin       string // the go command, "" if none
	goSkip      string // why go-build cannot run, "" if it can
	uses        int    // use* bits of the selected cases
	repoChanges int    // uncommitted changed files in base/repo
	tmp         string // harness-only files outside every root
	runID       int64  // distinguishes this run's go-build flags from others'
	nonce       int    // go-build compile-flag counter
	rep         *Report
}

// errUnavailable marks a system whose Setup reported errors.ErrUnsupported
// (already recorded in the report).
var errUnavailable = errors.New("system unavailable")

// runOne sets s up on the base case c needs, runs c, and tears s down.
func (h *harness) runOne(ctx context.Context, s System, c *caseDef) error {
	if _, ok := s.(Brancher); c.brancher && !ok {
		h.rep.skip(s.Name(), c, "not a Brancher")
		return nil
	}
	base := h.base
	if c.branchBase != nil {
		base = h.branchBases[c.branchBase(h.cfg)]
	}
	root, err := h.setup(ctx, s, base)
	if errors.Is(err, errors.ErrUnsupported) {
		h.rep.skipSystem(s.Name(), err)
		return errUnavailable
	}
	if err != nil {
		return err
	}
	if c.branchBase == nil {
		err = h.prepareSystem(ctx, root, c.modified)
	}
	if err == nil {
		err = h.runCase(ctx, s, root, base, c)
	}
	if terr := h.teardown(ctx, s); err == nil {
		err = terr
	}
	return err
}

func (h *harness) setup(ctx context.Context, s System, base string) (string, error) {
	scratch, err := os.MkdirTemp(h.dir, "sys-"+sanitize(s.Name())+"-")
	if err != nil {
		return "", fmt.Errorf("fsbench: %s: %w", s.Name(), err)
	}
	root, err := s.Setup(ctx, base, scratch)
	if err != nil {
		detachUnder(scratch)
		_ = removeAll(scratch)
		return "", fmt.Errorf("fsbench: set up %s: %w", s.Name(), err)
	}
	return root, nil
}

func (h *harness) teardown(ctx context.Context, s System) error {
	err := s.Teardown(ctx)
	if err != nil {
		err = fmt.Errorf("fsbench: tear down %s: %w", s.Name(), err)
	}
	if left := detachUnder(h.dir); len(left) > 0 && err == nil {
		err = api.Errorf(api.ErrInternal, "fsbench: %s left mounts behind (detached): %s", s.Name(), strings.Join(left, ", "))
	}
	// Remove the system's scratch now so the next system has the disk to
	// itself.
	entries, _ := os.ReadDir(h.dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "sys-") {
			_ = removeAll(filepath.Join(h.dir, e.Name()))
		}
	}
	return err
}

// runCase runs one case on a set-up system for the configured rounds.
func (h *harness) runCase(ctx context.Context, s System, root, base string, c *caseDef) error {
	e := &env{h: h, sys: s, root: root, base: base}
	if reason := c.skipReason(e); reason != "" {
		h.rep.skip(s.Name(), c, reason)
		return nil
	}
	if c.cold && !isRoot() {
		h.rep.skip(s.Name(), c, "cold cases drop caches, which needs root")
		return nil
	}
	res := Result{System: s.Name(), Case: c.name, Unit: c.unit, HigherIsBetter: c.higherBetter}
	rounds := h.cfg.Rounds
	if c.warmup {
		rounds++ // the first round only warms the caches
	}
	for r := range rounds {
		if err := ctx.Err(); err != nil {
			return err
		}
		if c.syncFirst {
			unix.Sync()
		}
		if c.cold {
			if err := h.dropCaches(ctx, s, root); err != nil {
				return fmt.Errorf("fsbench: %s/%s: %w", s.Name(), c.name, err)
			}
		}
		e.round = r
		e.sw = stopwatch{}
		ops, bytes, err := c.run(ctx, e)
		if errors.Is(err, errors.ErrUnsupported) {
			h.rep.skip(s.Name(), c, err.Error())
			return nil
		}
		if err != nil {
			return fmt.Errorf("fsbench: %s/%s round %d: %w", s.Name(), c.name, r, err)
		}
		if c.warmup && r == 0 {
			continue
		}
		if c.perLap {
			res.Samples = append(res.Samples, e.sw.laps...)
			res.Ops, res.Bytes = 1, bytes/int64(max(ops, 1))
		} else {
			res.Samples = append(res.Samples, e.sw.total)
			res.Ops, res.Bytes = ops, bytes
		}
	}
	res.finish()
	h.cfg.Logger.Info("case", "system", s.Name(), "case", c.name, "median", res.Median, "value", res.Value, "unit", res.Unit)
	h.rep.Results = append(h.rep.Results, res)
	return nil
}

// stopwatch accumulates the timed parts of a round. onStart and onStop
// mirror it into a testing.B timer.
type stopwatch struct {
	t0      time.Time
	total   time.Duration
	laps    []time.Duration // each start..stop
	onStart func()
	onStop  func()
}

func (s *stopwatch) start() {
	if s.onStart != nil {
		s.onStart()
	}
	s.t0 = time.Now()
}

func (s *stopwatch) stop() { s.stopAs(time.Since(s.t0)) }

// stopAs ends the lap as lasting d: the service time a ServiceTimer
// measured where the operation ran.
func (s *stopwatch) stopAs(d time.Duration) {
	s.total += d
	s.laps = append(s.laps, d)
	if s.onStop != nil {
		s.onStop()
	}
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' || r == 0 {
			return '_'
		}
		return r
	}, name)
}

func isRoot() bool { return os.Geteuid() == 0 }
