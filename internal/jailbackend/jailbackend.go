package jailbackend

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/jail"
)

// Name is the backend's name at tree_create.
const Name = "jail"

// StartRAM is what a freshly started sandbox is expected to hold until
// measured, as RAM measures it: its cgroup's charge, which counts what
// init and its processes allocate once in the sandbox's cgroup (0 to 0.25
// MiB for an idle one on the development host, TestStartRAM), not the
// pages init's Go runtime touched before (a spare's, in a placeholder
// cgroup; on a v1 memory controller, in the daemon's): init's own PSS,
// about 2.8 MiB (internal/jail's benchmarks), is not counted.
const StartRAM = 256 << 10

// defaultEnv is the environment every command gets before its own
// (Command.Env entries of the same key replace these).
var defaultEnv = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp"}

// Config configures the backend of every tree it opens.
type Config struct {
	// Spares is jail.Config.Spares for each tree's manager: inits kept
	// started ahead of need. 0 means 1; negative means none.
	Spares int
	// Binary is jail.Config.Binary (default /proc/self/exe, which must
	// call jail.Main first).
	Binary string
	// Image returns the root filesystem (a host directory) of the image
	// a tree names (engine.BackendConfig.Image), or an error wrapping
	// api.ErrNotFound; nil serves no images.
	Image func(name string) (root string, err error)
	// Pasta is jail.Config.Pasta, for trees with outbound network.
	Pasta string
}

// Available says whether this process can run sandboxes: nil, or why not
// (the binary does not call jail.Main first, not root, no usable cgroup
// hierarchy). It starts no sandbox.
func Available() error {
	if !jail.MainRan() {
		return errors.New("this binary does not call jail.Main first (a sandbox's init is a re-exec of it)")
	}
	dir, err := os.MkdirTemp("", "arbor-jail-probe-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	m, err := jail.New(jail.Config{StateDir: dir, Label: fmt.Sprintf("probe-%d", os.Getpid()), Spares: -1})
	if err != nil {
		return err
	}
	return m.Close()
}

// Open returns the engine.OpenBackend of the jail backend.
func Open(cfg Config) engine.OpenBackend {
	return func(ctx context.Context, bc engine.BackendConfig) (engine.Backend, error) {
		return open(ctx, cfg, bc)
	}
}

type backend struct {
	m      *jail.Manager
	tmp    *tmpLayer // every node's /tmp
	legacy string    // <Dir>/tmp: the plain per-node /tmp directories of before the layer
	// outbound: the tree's sandboxes get outbound network (pasta).
	outbound bool
	// memoryMax and pidsMax limit every sandbox (jail.Spec): the tree's
	// budget's MaxNodeRAMBytes and MaxNodePids (0: none).
	memoryMax, pidsMax int64

	// op orders the verbs that change what is held (the engine calls them
	// under the tree's mutex already; this keeps the backend safe for
	// concurrent use without holding mu across a sandbox's start or stop).
	op sync.Mutex
	// pause is how long the last Fork of a live source held it frozen,
	// tmpFork how long its /tmp fork took (BenchmarkFork reports them);
	// guarded by op.
	pause, tmpFork time.Duration
	starts         []time.Duration // the last Fork's children's starts; guarded by op

	mu sync.Mutex // guards nodes and closed; held only briefly
	// nodes are the held nodes by id: a live one's sandbox, or nil for a
	// suspended one.
	nodes  map[string]*jail.Sandbox
	closed bool

	bg bgProcs // background processes (faces.go)
}

func open(ctx context.Context, cfg Config, bc engine.BackendConfig) (_ engine.Backend, err error) {
	if bc.Dir == "" || !filepath.IsAbs(bc.Dir) {
		return nil, api.Errorf(api.ErrInternal, "jail backend: directory %q must be an absolute path", bc.Dir)
	}
	b := &backend{legacy: filepath.Join(bc.Dir, "tmp"), nodes: map[string]*jail.Sandbox{},
		memoryMax: bc.Budget.MaxNodeRAMBytes, pidsMax: bc.Budget.MaxNodePids}
	var root string
	if bc.Image != "" {
		if cfg.Image == nil {
			return nil, api.Errorf(api.ErrBadRequest, "jail backend: image %q: this daemon serves no images", bc.Image)
		}
		if root, err = cfg.Image(bc.Image); err != nil {
			return nil, fmt.Errorf("jail backend: %w", err)
		}
	}
	switch bc.Network {
	case "":
	case api.NetworkOutbound:
		// Checked before anything is made (jail.New checks it too).
		if err := jail.PastaAvailable(cfg.Pasta); err != nil {
			return nil, fmt.Errorf("jail backend: %w", err)
		}
		b.outbound = true
	default:
		return nil, api.Errorf(api.ErrBadRequest, "jail backend: network %q", bc.Network)
	}
	// The /tmp layer's mount before any init: an init's mount namespace
	// (a spare's is made ahead of need) sees only the mounts made before
	// it. A mount an earlier daemon left is detached lazily: its
	// sandboxes, reaped below, keep nothing of it.
	if b.tmp, err = openTmp(bc.Dir, bc.Budget.MaxDiskBytes); err != nil {
		return nil, fmt.Errorf("jail backend: %w", err)
	}
	defer func() {
		if err != nil {
			b.tmp.close()
		}
	}()
	b.m, err = jail.New(jail.Config{StateDir: filepath.Join(bc.Dir, "jail"), Label: Label(bc), Spares: cfg.Spares, Binary: cfg.Binary,
		Root: root, Outbound: b.outbound, Pasta: cfg.Pasta})
	if err != nil {
		return nil, fmt.Errorf("jail backend: %w", err)
	}
	defer func() {
		if err != nil {
			b.m.Close()
		}
	}()
	// The spare first: Reap kills every cgroup under the label that the
	// manager does not hold, and a spare being spawned is not held yet.
	// A spare that cannot be made is not fatal here (Start spawns cold
	// and reports its own error).
	_ = b.m.Warm(ctx)
	if _, err := b.m.Reap(ctx); err != nil {
		return nil, fmt.Errorf("jail backend: reap what an earlier daemon left: %w", err)
	}
	if err := b.migrate(); err != nil {
		return nil, fmt.Errorf("jail backend: %w", err)
	}
	for _, id := range b.tmp.nodes() {
		// Kept by an earlier open: suspended, its /tmp unwritable until
		// it is resumed.
		if err := b.tmp.setWritable(id, false); err != nil {
			return nil, fmt.Errorf("jail backend: %w", err)
		}
		b.nodes[id] = nil
	}
	return b, nil
}

var nonLabel = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// Label names a tree's sandboxes in the cgroup tree (jail.Config.Label):
// its id, and a hash of its backend directory, which is one per tree and
// per daemon home.
func Label(bc engine.BackendConfig) string {
	sum := sha256.Sum256([]byte(filepath.Clean(bc.Dir)))
	id := nonLabel.ReplaceAllString(bc.Tree, "_")
	if len(id) > 40 {
		id = id[:40]
	}
	return "t" + id + "-" + hex.EncodeToString(sum[:8])
}

func (b *backend) Caps() engine.Caps {
	return engine.Caps{Exec: true, StartRAM: StartRAM, Lost: engine.LostRestart}
}

// get returns node id's sandbox (nil: suspended), and whether it is held.
func (b *backend) get(id string) (*jail.Sandbox, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, ok := b.nodes[id]
	return n, ok
}

// hold records node id as held, live with sb or suspended (sb nil).
func (b *backend) hold(id string, sb *jail.Sandbox) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nodes[id] = sb
}

func (b *backend) drop(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.nodes, id)
	b.dropProcs(id)
}

func (b *backend) checkOpen(verb string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return api.Errorf(api.ErrState, "jail backend: %s: closed", verb)
	}
	return nil
}

// TmpPath is where node id's /tmp is on the host: the one place that says
// so (the files API serves a jail node's /tmp through it). It is a path
// of the /tmp layer's mount, read-only while the node is suspended.
func (b *backend) TmpPath(id string) (string, error) {
	if err := b.checkOpen("/tmp of " + id); err != nil {
		return "", err
	}
	return b.tmp.path(id)
}

// checkID refuses an id that cannot name a node here.
func checkID(id string) error {
	if err := jail.CheckName(id); err != nil {
		return err
	}
	return checkTmpName(id)
}

// run starts node id's sandbox over path, with its /tmp (an empty one
// made if it has none) writable; b.op is held.
func (b *backend) run(ctx context.Context, id, path string) error {
	if err := b.tmp.ensure(id); err != nil {
		return err
	}
	if err := b.tmp.setWritable(id, true); err != nil {
		return err
	}
	tmp, err := b.tmp.path(id)
	if err != nil {
		return err
	}
	// The sandbox outlives the call: ctx bounds its start only.
	sb, err := b.m.Start(ctx, jail.Spec{Name: id, Workspace: path, Tmp: tmp, MemoryMax: b.memoryMax, PidsMax: b.pidsMax})
	if err != nil {
		return err
	}
	b.hold(id, sb)
	return nil
}

func (b *backend) Start(ctx context.Context, id, path string) error {
	b.op.Lock()
	defer b.op.Unlock()
	if err := b.checkOpen("start " + id); err != nil {
		return err
	}
	if err := checkID(id); err != nil {
		return fmt.Errorf("jail backend: start: %w", err)
	}
	if _, ok := b.get(id); ok {
		return api.Errorf(api.ErrExists, "jail backend: start %s: already held", id)
	}
	had := b.tmp.has(id)
	if err := b.run(ctx, id, path); err != nil {
		if !had { // the /tmp just made
			err = errors.Join(err, b.tmp.drop(id))
		}
		return fmt.Errorf("jail backend: start %s: %w", id, err)
	}
	return nil
}

func (b *backend) Fork(ctx context.Context, source string, children []string, files func(context.Context) ([]string, error)) error {
	b.op.Lock()
	defer b.op.Unlock()
	if err := b.checkOpen("fork " + source); err != nil {
		return err
	}
	src, ok := b.get(source)
	if !ok {
		return api.Errorf(api.ErrNotFound, "jail backend: fork %s: not held", source)
	}
	for _, c := range children {
		if _, dup := b.get(c); dup {
			return api.Errorf(api.ErrExists, "jail backend: fork %s: child %s already held", source, c)
		}
		if err := checkID(c); err != nil {
			return fmt.Errorf("jail backend: fork %s: %w", source, err)
		}
		if b.tmp.has(c) {
			return api.Errorf(api.ErrExists, "jail backend: fork %s: child %s has a /tmp already", source, c)
		}
	}
	b.pause, b.starts = 0, b.starts[:0]
	paths, err := b.paused(ctx, source, src, children, files)
	if err != nil {
		return err
	}
	// One after another: started side by side they took as long on this
	// 2-core host (BenchmarkFork/children=3), cold starts being CPU-bound.
	for i, c := range children {
		t0 := time.Now()
		err := b.run(ctx, c, paths[i])
		b.starts = append(b.starts, time.Since(t0))
		if err != nil {
			for _, done := range children { // started or not, each has a /tmp now
				b.stop(context.WithoutCancel(ctx), done)
			}
			return fmt.Errorf("jail backend: fork %s: start child %s: %w", source, c, err)
		}
	}
	return nil
}

// paused runs files, then forks source's /tmp for children, with source's
// sandbox frozen (a suspended source runs nothing to freeze), and thaws it
// after, whatever happened: the children's files and /tmp are the
// source's as of one instant.
func (b *backend) paused(ctx context.Context, source string, src *jail.Sandbox, children []string, files func(context.Context) ([]string, error)) (paths []string, err error) {
	if src != nil {
		start := time.Now()
		if err := src.Freeze(); err != nil {
			return nil, fmt.Errorf("jail backend: fork %s: pause: %w", source, err)
		}
		defer func() {
			if terr := src.Thaw(); terr != nil {
				err = errors.Join(err, fmt.Errorf("jail backend: fork %s: resume the source: %w", source, terr))
			}
			b.pause = time.Since(start)
		}()
	}
	paths, err = files(ctx)
	if err != nil {
		return nil, fmt.Errorf("jail backend: fork %s: files: %w", source, err)
	}
	if len(paths) != len(children) {
		return nil, api.Errorf(api.ErrInternal, "jail backend: fork %s: the files' fork gave %d paths for %d children", source, len(paths), len(children))
	}
	start := time.Now()
	if err := b.tmp.fork(source, children); err != nil {
		return nil, fmt.Errorf("jail backend: fork %s: %w", source, err)
	}
	b.tmpFork = time.Since(start)
	return paths, nil
}

func (b *backend) Suspend(ctx context.Context, id string) error {
	b.op.Lock()
	defer b.op.Unlock()
	sb, ok := b.get(id)
	switch {
	case !ok:
		return api.Errorf(api.ErrNotFound, "jail backend: suspend %s: not held", id)
	case sb == nil:
		return api.Errorf(api.ErrState, "jail backend: suspend %s: already suspended", id)
	}
	// Its processes end; its /tmp stays, and with it the node, unwritable
	// until it is resumed.
	b.hold(id, nil)
	if err := sb.Stop(ctx); err != nil {
		return fmt.Errorf("jail backend: suspend %s: %w", id, err)
	}
	if err := b.tmp.setWritable(id, false); err != nil {
		return fmt.Errorf("jail backend: suspend %s: %w", id, err)
	}
	return nil
}

func (b *backend) Resume(ctx context.Context, id, path string) error {
	b.op.Lock()
	defer b.op.Unlock()
	if err := b.checkOpen("resume " + id); err != nil {
		return err
	}
	if err := checkID(id); err != nil {
		return fmt.Errorf("jail backend: resume: %w", err)
	}
	sb, held := b.get(id)
	if sb != nil {
		return api.Errorf(api.ErrState, "jail backend: resume %s: already live", id)
	}
	if err := b.run(ctx, id, path); err != nil {
		if held { // still suspended: its /tmp read-only again
			err = errors.Join(err, b.tmp.setWritable(id, false))
		}
		return fmt.Errorf("jail backend: resume %s: %w", id, err)
	}
	return nil
}

// Commit makes child's /tmp its parent's (see the package's doc): O(1),
// one metadata transaction of the /tmp layer's store, so a crash leaves it
// done or not; a child with no /tmp left was committed already.
func (b *backend) Commit(ctx context.Context, child, parent string) error {
	b.op.Lock()
	defer b.op.Unlock()
	if err := b.checkOpen("commit " + child); err != nil {
		return err
	}
	if err := checkID(child); err != nil {
		return fmt.Errorf("jail backend: commit: %w", err)
	}
	if err := b.tmp.commit(child, parent); err != nil {
		return fmt.Errorf("jail backend: commit %s into %s: %w", child, parent, err)
	}
	return nil
}

func (b *backend) Stop(ctx context.Context, id string) error {
	b.op.Lock()
	defer b.op.Unlock()
	return b.stop(ctx, id)
}

// stop ends node id for good; b.op is held.
func (b *backend) stop(ctx context.Context, id string) error {
	if checkID(id) != nil {
		return nil // no node of that name can be held
	}
	if sb, _ := b.get(id); sb != nil {
		if err := sb.Stop(ctx); err != nil {
			return fmt.Errorf("jail backend: stop %s: %w", id, err)
		}
	}
	if err := b.tmp.drop(id); err != nil {
		return fmt.Errorf("jail backend: stop %s: %w", id, err)
	}
	b.drop(id)
	return nil
}

func (b *backend) Exec(ctx context.Context, id string, cmd engine.Command, out func(api.ExecOutput) error) (api.ExecExit, error) {
	start := time.Now()
	sb, err := b.live("exec on", id, cmd)
	if err != nil {
		return api.ExecExit{}, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The sandbox's count of processes killed for its memory limit,
	// before and after: a rise is the command's (or a sibling exec's,
	// which the count cannot tell apart) running out of memory.
	ooms, oomErr := sb.OOMKills()
	w := &streams{out: out, cancel: cancel}
	p, err := sb.Start(execSpec(cmd, w.to("stdout"), w.to("stderr")))
	if err != nil {
		return api.ExecExit{}, fmt.Errorf("jail backend: exec on %s: %w", id, err)
	}
	if cmd.TTY && cmd.Resize != nil {
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { resizer(p, cmd.Resize, done) })
		defer wg.Wait()
		defer close(done)
	}
	st, err := p.Wait(cctx)
	x := exitOf(st, start)
	if after, err := sb.OOMKills(); oomErr == nil && err == nil && after > ooms {
		x.OOMKilled = true
	}
	if oerr := w.failed(); oerr != nil {
		return x, fmt.Errorf("jail backend: exec output: %w", oerr)
	}
	if err != nil {
		return x, fmt.Errorf("jail backend: exec on %s: %w", id, err)
	}
	return x, nil
}

// environ is the default environment with env's entries over it.
func environ(env []string) []string {
	out := slices.Clone(defaultEnv)
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		out = slices.DeleteFunc(out, func(d string) bool { return strings.HasPrefix(d, k+"=") })
		out = append(out, kv)
	}
	return out
}

// streams turns a process's two outputs into chunks for out, one at a
// time; the first error from out ends the command (cancel) and drops the
// rest of its output.
type streams struct {
	out    func(api.ExecOutput) error
	cancel context.CancelFunc
	mu     sync.Mutex
	err    error
}

func (s *streams) to(stream string) io.Writer {
	return writer(func(b []byte) (int, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.err == nil {
			if s.err = s.out(api.ExecOutput{Stream: stream, Data: slices.Clone(b)}); s.err != nil {
				s.cancel()
			}
		}
		return len(b), nil // drained either way, so the command never blocks on a full pipe
	})
}

func (s *streams) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

type writer func([]byte) (int, error)

func (f writer) Write(b []byte) (int, error) { return f(b) }

// RAM is each live sandbox's charged memory (its cgroup's). A sandbox
// whose cgroup cannot be read (no memory controller) is left out, and the
// first such error returned with what was measured.
func (b *backend) RAM(ctx context.Context) (map[string]int64, error) {
	b.mu.Lock()
	live := map[string]*jail.Sandbox{}
	for id, sb := range b.nodes {
		if sb != nil {
			live[id] = sb
		}
	}
	b.mu.Unlock()
	out := make(map[string]int64, len(live))
	var first error
	for id, sb := range live {
		v, err := sb.MemoryBytes()
		if err != nil {
			if first == nil {
				first = fmt.Errorf("jail backend: RAM of %s: %w", id, err)
			}
			continue
		}
		out[id] = v
	}
	return out, first
}

// DiskUsage is what each node's /tmp holds on disk (engine.DiskUser): the
// tree's disk budget counts it with the files.
func (b *backend) DiskUsage() map[string]int64 { return b.tmp.usage() }

var _ engine.DiskUser = (*backend)(nil)

func (b *backend) Nodes(ctx context.Context) ([]engine.HeldNode, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]engine.HeldNode, 0, len(b.nodes))
	for id, sb := range b.nodes {
		st := engine.HeldSuspended
		if sb != nil {
			st = engine.HeldLive
		}
		out = append(out, engine.HeldNode{ID: id, State: st})
	}
	slices.SortFunc(out, func(a, b engine.HeldNode) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Close stops every sandbox; every node's /tmp stays on disk, so the next
// open holds them suspended.
func (b *backend) Close() error {
	b.op.Lock()
	defer b.op.Unlock()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	for id := range b.nodes {
		b.nodes[id] = nil
	}
	b.mu.Unlock()
	err := b.m.Close()
	b.bg.wg.Wait() // every background process ended with its sandbox
	// The sandboxes are gone: nothing uses the /tmp layer's mount now.
	if terr := b.tmp.close(); terr != nil {
		err = errors.Join(err, terr)
	}
	if err != nil {
		return fmt.Errorf("jail backend: close: %w", err)
	}
	return nil
}
