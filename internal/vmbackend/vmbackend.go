// Package vmbackend is the engine's vm backend: every live node of a vm
// tree is a running microVM (internal/vm), cloned from its image's
// template at Start, forked with its whole memory at Fork.
//
// # What a node is here
//
// A live node is a QEMU process whose guest RAM maps a memory image
// MAP_PRIVATE (the template's, or its fork point's), with its state
// directory <Dir>/nodes/<id> holding links to that image and its device
// state. A suspended node is that directory alone, saved by vm.Suspend
// (the pages it wrote, its devices), its process ended. A stopped node is
// nothing.
//
// Fork pauses the source, saves its device state and the pages it wrote
// since its image, forks the files inside the pause, resumes it, and
// starts every child from the fork point (vm.Fork). Commit makes the
// child's saved state the parent's: the parent's VM is restarted from it.
// Close suspends every live node (its state kept for the next open); after
// a crash (arbord SIGKILLed: every QEMU dies with it, Pdeathsig) a node is
// found suspended at its last saved state (its start or its last fork
// point), and tree_resume brings it back from there (Caps.Lost is
// LostSuspend).
//
// # Files
//
// The node's files are the guest's /workspace: a FUSE filesystem in the
// guest's agent whose calls go to the host over the agent's
// virtio-serial port, by path, confined to the node's files (os.Root).
// The Debian cloud kernel has no 9p, a mounted virtio-9p export blocks
// QEMU's migration, and virtio-fs (vhost-user) cannot be migrated; a
// path-based channel forks with nothing to carry: a child's host serves
// the child's files, and calls in flight at the fork are sent again to it.
// Exec's Cwd is /workspace/<Cwd>.
//
// # Not yet
//
//   - The guest is an initramfs in the guest's RAM: busybox, and the
//     host's python3 where the daemon includes it (vm.PythonInclude); an
//     mmdebstrap root filesystem on a read-only disk (internal/image) is
//     the next step.
//   - A fork point's memory image is a copy of the source's image (its
//     data, not its holes) with the pages it wrote: reflink on XFS/btrfs
//     would share the blocks (vm.Snapshot.Reflinked says which happened).
package vmbackend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/vm"
)

// Name is the backend's name at tree_create.
const Name = "vm"

// Config configures the backend of every tree it opens.
type Config struct {
	// VM is the image every tree's VMs run (its Home: the image cache).
	VM vm.Config
}

var (
	imgMu sync.Mutex
	imgs  = map[string]*vm.Image{} // built images by cache directory
)

// image builds (or finds in the cache) cfg's image, once per process.
func image(ctx context.Context, cfg vm.Config) (*vm.Image, error) {
	imgMu.Lock()
	defer imgMu.Unlock()
	if img := imgs[cfg.Home]; img != nil {
		return img, nil
	}
	img, err := vm.Build(ctx, cfg)
	if err != nil {
		return nil, err
	}
	imgs[cfg.Home] = img
	return img, nil
}

// FindAgent returns the guest agent's binary: arbor-guest next to this
// executable, or on PATH.
func FindAgent() (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "arbor-guest")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath("arbor-guest")
}

// Available says whether this host can run the backend's VMs: nil, or why
// not. It builds no image.
func Available(cfg Config) error {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return err
	}
	if ks, _ := filepath.Glob("/boot/vmlinuz-*-cloud-amd64"); len(ks) == 0 && cfg.VM.Kernel == "" {
		return errors.New("no guest kernel /boot/vmlinuz-*-cloud-amd64")
	}
	if cfg.VM.Agent == "" {
		return errors.New("no guest agent binary (arbor-guest)")
	}
	return nil
}

// Open returns the engine.OpenBackend of the vm backend.
func Open(cfg Config) engine.OpenBackend {
	return func(ctx context.Context, bc engine.BackendConfig) (engine.Backend, error) {
		return open(ctx, cfg, bc)
	}
}

type backend struct {
	img   *vm.Image
	nodes string // <Dir>/nodes

	op   sync.Mutex   // orders the verbs that change what is held
	last vm.ForkStats // the last Fork's figures (LastFork), under op

	mu     sync.Mutex
	held   map[string]*vm.VM // live VM, or nil: suspended
	paths  map[string]string // files path of each node started
	closed bool
}

var validID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

func open(ctx context.Context, cfg Config, bc engine.BackendConfig) (engine.Backend, error) {
	if bc.Dir == "" || !filepath.IsAbs(bc.Dir) {
		return nil, api.Errorf(api.ErrInternal, "vm backend: directory %q must be an absolute path", bc.Dir)
	}
	img, err := image(ctx, cfg.VM)
	if err != nil {
		return nil, fmt.Errorf("vm backend: %w: image: %w", api.ErrInternal, err)
	}
	b := &backend{img: img, nodes: filepath.Join(bc.Dir, "nodes"), held: map[string]*vm.VM{}, paths: map[string]string{}}
	if err := os.MkdirAll(b.nodes, 0o700); err != nil {
		return nil, fmt.Errorf("vm backend: %w: %w", api.ErrInternal, err)
	}
	ents, err := os.ReadDir(b.nodes)
	if err != nil {
		return nil, fmt.Errorf("vm backend: %w: %w", api.ErrInternal, err)
	}
	for _, e := range ents {
		d := filepath.Join(b.nodes, e.Name())
		vm.ReapDir(d) // a QEMU an earlier daemon left
		if validID.MatchString(e.Name()) && vm.HasState(d) {
			b.held[e.Name()] = nil // suspended at its last saved state
		} else {
			os.RemoveAll(d)
		}
	}
	return b, nil
}

func (b *backend) Caps() engine.Caps {
	return engine.Caps{Exec: true, ForkCarriesMemory: true, Lost: engine.LostSuspend}
}

func (b *backend) dir(id string) string { return filepath.Join(b.nodes, id) }

func (b *backend) get(id string) (*vm.VM, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.held[id]
	return v, ok
}

func (b *backend) set(id string, v *vm.VM) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.held[id] = v
}

func (b *backend) check(verb, id string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return api.Errorf(api.ErrState, "vm backend: %s: closed", verb)
	}
	if !validID.MatchString(id) {
		return api.Errorf(api.ErrBadRequest, "vm backend: %s: bad node id %q", verb, id)
	}
	return nil
}

func (b *backend) Start(ctx context.Context, id, path string) error {
	if err := b.check("start", id); err != nil {
		return err
	}
	b.op.Lock()
	defer b.op.Unlock()
	if _, ok := b.get(id); ok {
		return api.Errorf(api.ErrExists, "vm backend: start %s: held already", id)
	}
	return b.fresh(ctx, id, path)
}

// fresh starts id from the image's template; b.op is held.
func (b *backend) fresh(ctx context.Context, id, path string) error {
	d := b.dir(id)
	os.RemoveAll(d)
	if err := vm.Seed(d, b.img.Mem, b.img.Dev); err != nil {
		return fmt.Errorf("vm backend: start %s: %w: %w", id, api.ErrInternal, err)
	}
	return b.run(ctx, id, path)
}

// run starts id from the state in its directory over its files at path;
// b.op is held.
func (b *backend) run(ctx context.Context, id, path string) error {
	v, err := vm.Start(ctx, b.img, b.dir(id), id, path)
	if err != nil {
		return fmt.Errorf("vm backend: start %s: %w: %w", id, api.ErrInternal, err)
	}
	b.set(id, v)
	b.setPath(id, path)
	return nil
}

// setPath records id's files path, for a restart by Commit.
func (b *backend) setPath(id, path string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.paths[id] = path
}

func (b *backend) path(id string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.paths[id]
}

func (b *backend) Fork(ctx context.Context, source string, children []string, files func(context.Context) ([]string, error)) error {
	if err := b.check("fork", source); err != nil {
		return err
	}
	for _, c := range children {
		if err := b.check("fork", c); err != nil {
			return err
		}
	}
	b.op.Lock()
	defer b.op.Unlock()
	b.last = vm.ForkStats{}
	src, ok := b.get(source)
	if !ok {
		return api.Errorf(api.ErrNotFound, "vm backend: fork of %s: not held", source)
	}
	for _, c := range children {
		if _, ok := b.get(c); ok {
			return api.Errorf(api.ErrExists, "vm backend: fork into %s: held already", c)
		}
	}
	var dirs []string
	for _, c := range children {
		dirs = append(dirs, b.dir(c))
		os.RemoveAll(b.dir(c))
	}
	filesStep := func(ctx context.Context) ([]string, error) {
		paths, err := files(ctx)
		if err == nil && len(paths) != len(children) {
			err = fmt.Errorf("files step returned %d paths for %d children", len(paths), len(children))
		}
		return paths, err
	}
	if src == nil {
		// A suspended source: its saved state is the fork point.
		paths, err := filesStep(ctx)
		if err != nil {
			return fmt.Errorf("vm backend: fork of %s: %w", source, err)
		}
		var started []string
		for i, c := range children {
			err := vm.Seed(b.dir(c), filepath.Join(b.dir(source), vm.MemFile), filepath.Join(b.dir(source), vm.DevFile))
			if err == nil {
				err = b.run(ctx, c, paths[i])
			}
			if err != nil {
				for _, s := range started {
					b.stop(s)
				}
				os.RemoveAll(b.dir(c))
				return fmt.Errorf("vm backend: fork of %s: %w", source, err)
			}
			started = append(started, c)
		}
		return nil
	}
	var kidPaths []string
	kids, st, err := vm.Fork(ctx, src, dirs, children, func(ctx context.Context) ([]string, error) {
		p, err := filesStep(ctx)
		kidPaths = p
		return p, err
	})
	if err != nil {
		for _, d := range dirs {
			os.RemoveAll(d)
		}
		if errors.Is(err, vm.ErrQEMUExited) {
			// The source is gone: it is held suspended at its last saved
			// state.
			src.Kill()
			b.set(source, nil)
		}
		return fmt.Errorf("vm backend: fork of %s: %w", source, err)
	}
	for i, c := range children {
		b.set(c, kids[i])
		b.setPath(c, kidPaths[i])
	}
	b.last = st
	return nil
}

// LastFork is engine.ForkTimer: how long the last Fork of a running
// source held it paused (its save, the files' fork, its resume; zero for a
// suspended source), and for each child the time from the fork call to
// its CPUs running (its agent's first reply follows: vm.ForkStats.Reply).
func (b *backend) LastFork() engine.ForkTimings {
	b.op.Lock()
	defer b.op.Unlock()
	return engine.ForkTimings{Pause: b.last.Pause, Starts: slices.Clone(b.last.Running)}
}

var _ engine.ForkTimer = (*backend)(nil)

func (b *backend) Suspend(ctx context.Context, id string) error {
	if err := b.check("suspend", id); err != nil {
		return err
	}
	b.op.Lock()
	defer b.op.Unlock()
	v, ok := b.get(id)
	switch {
	case !ok:
		return api.Errorf(api.ErrNotFound, "vm backend: suspend %s: not held", id)
	case v == nil:
		return api.Errorf(api.ErrState, "vm backend: suspend %s: suspended already", id)
	}
	err := vm.Suspend(ctx, v)
	v.Kill()
	b.set(id, nil)
	if err != nil {
		return fmt.Errorf("vm backend: suspend %s: %w", id, err)
	}
	return nil
}

func (b *backend) Resume(ctx context.Context, id, path string) error {
	if err := b.check("resume", id); err != nil {
		return err
	}
	b.op.Lock()
	defer b.op.Unlock()
	v, ok := b.get(id)
	switch {
	case !ok:
		return b.fresh(ctx, id, path)
	case v != nil:
		return api.Errorf(api.ErrState, "vm backend: resume %s: live", id)
	}
	return b.run(ctx, id, path)
}

func (b *backend) Commit(ctx context.Context, child, parent string) error {
	if err := b.check("commit", child); err != nil {
		return err
	}
	b.op.Lock()
	defer b.op.Unlock()
	c, ok := b.get(child)
	if !ok || !vm.HasState(b.dir(child)) {
		// Committed already (the engine stopped the child after it).
		return nil
	}
	if c != nil {
		return api.Errorf(api.ErrState, "vm backend: commit %s: live (suspend it first)", child)
	}
	p, _ := b.get(parent)
	if p != nil {
		p.Kill()
	}
	if err := vm.Seed(b.dir(parent), filepath.Join(b.dir(child), vm.MemFile), filepath.Join(b.dir(child), vm.DevFile)); err != nil {
		b.set(parent, nil)
		return fmt.Errorf("vm backend: commit %s into %s: %w: %w", child, parent, api.ErrInternal, err)
	}
	if p == nil {
		b.set(parent, nil) // suspended, at the child's state
		return nil
	}
	return b.run(ctx, parent, b.path(parent))
}

func (b *backend) Stop(ctx context.Context, id string) error {
	b.op.Lock()
	defer b.op.Unlock()
	b.stop(id)
	return nil
}

// stop kills id's VM and drops its state; b.op is held.
func (b *backend) stop(id string) {
	if v, _ := b.get(id); v != nil {
		v.Kill()
	}
	b.mu.Lock()
	delete(b.held, id)
	b.mu.Unlock()
	if validID.MatchString(id) {
		os.RemoveAll(b.dir(id))
	}
}

func (b *backend) Exec(ctx context.Context, id string, cmd engine.Command, out func(api.ExecOutput) error) (api.ExecExit, error) {
	start := time.Now()
	v, ok := b.get(id)
	switch {
	case !ok:
		return api.ExecExit{}, api.Errorf(api.ErrNotFound, "vm backend: exec on %s: not held", id)
	case v == nil:
		return api.ExecExit{}, api.Errorf(api.ErrState, "vm backend: exec on %s: suspended", id)
	case len(cmd.Argv) == 0:
		return api.ExecExit{}, api.Errorf(api.ErrBadRequest, "vm backend: exec on %s: no command", id)
	case cmd.Cwd != "" && !filepath.IsLocal(cmd.Cwd):
		return api.ExecExit{}, api.Errorf(api.ErrBadRequest, "vm backend: exec on %s: cwd %q is not a path inside the node", id, cmd.Cwd)
	}
	cwd := filepath.Join("/workspace", cmd.Cwd)
	var stdin io.Reader = cmd.Stdin
	x, err := v.Exec(ctx, vm.Cmd{Argv: cmd.Argv, Env: cmd.Env, Cwd: cwd, Timeout: cmd.Timeout, Stdin: stdin},
		func(stream string, data []byte) error { return out(api.ExecOutput{Stream: stream, Data: data}) })
	r := api.ExecExit{ExitCode: x.Code, Signal: x.Signal, DurationNS: max(time.Since(start).Nanoseconds(), 1)}
	if x.Signal != "" {
		r.ExitCode = -1
	}
	if err != nil {
		return r, fmt.Errorf("vm backend: exec on %s: %w", id, err)
	}
	return r, nil
}

func (b *backend) RAM(ctx context.Context) (map[string]int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]int64{}
	for id, v := range b.held {
		if v == nil {
			continue
		}
		if n, err := v.PSS(); err == nil {
			out[id] = n
		}
	}
	return out, nil
}

func (b *backend) Nodes(ctx context.Context) ([]engine.HeldNode, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []engine.HeldNode
	for id, v := range b.held {
		st := engine.HeldLive
		if v == nil {
			st = engine.HeldSuspended
		}
		out = append(out, engine.HeldNode{ID: id, State: st})
	}
	return out, nil
}

// Close suspends every live node: its state stays for the next open.
func (b *backend) Close() error {
	b.op.Lock()
	defer b.op.Unlock()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	live := map[string]*vm.VM{}
	for id, v := range b.held {
		if v != nil {
			live[id] = v
		}
	}
	b.mu.Unlock()
	var errs []error
	for id, v := range live {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := vm.Suspend(ctx, v); err != nil {
			errs = append(errs, fmt.Errorf("suspend %s: %w", id, err))
		}
		cancel()
		v.Kill()
		b.set(id, nil)
	}
	return errors.Join(errs...)
}
