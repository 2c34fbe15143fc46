package jail

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/arbor-dev/arbor/api"
)

// hierarchy is what this host's cgroups offer, found once by New.
type hierarchy struct {
	mode cgroups.CGMode
	// v2 is the cgroup2 mount ("" on a v1-only host): placement
	// (CLONE_INTO_CGROUP), cgroup.kill and cgroup.freeze go through it.
	v2 string
	// v2Self is the caller's own cgroup2 path, below which ours go.
	v2Self string
	// v2Kill: the kernel has cgroup.kill (and so cgroup.freeze).
	v2Kill bool
	// v1 lists the v1 controllers we use (memory, pids, freezer) that
	// the host has mounted, each with the caller's path in it.
	v1     []cgroup1.Name
	v1Self map[cgroup1.Name]string
}

const v1Root = "/sys/fs/cgroup"

func probeHierarchy() (*hierarchy, error) {
	h := &hierarchy{mode: cgroups.Mode()}
	switch h.mode {
	case cgroups.Unified:
		h.v2 = v1Root
	case cgroups.Hybrid:
		h.v2 = filepath.Join(v1Root, "unified")
	case cgroups.Legacy:
	default:
		return nil, fmt.Errorf("no cgroup hierarchy mounted")
	}
	if h.v2 != "" {
		self, err := cgroup2.NestedGroupPath("")
		if err != nil {
			return nil, fmt.Errorf("own cgroup2 path: %w", err)
		}
		h.v2Self = self
		// Without cgroup.kill (kernels before 5.14) the v2 side still
		// places processes; kill goes through v1 or init.
		h.v2Kill = hasCgroupKill(h.v2, self)
	}
	if h.mode != cgroups.Unified {
		paths, err := cgroup1.ParseCgroupFile("/proc/self/cgroup")
		if err != nil {
			return nil, fmt.Errorf("own cgroup paths: %w", err)
		}
		h.v1Self = map[cgroup1.Name]string{}
		for _, n := range []cgroup1.Name{cgroup1.Memory, cgroup1.Pids, cgroup1.Freezer} {
			if p, ok := paths[string(n)]; ok {
				if _, err := os.Stat(filepath.Join(v1Root, string(n), p)); err == nil {
					h.v1 = append(h.v1, n)
					h.v1Self[n] = p
				}
			}
		}
	}
	if h.v2 == "" && !h.hasV1(cgroup1.Freezer) {
		return nil, fmt.Errorf("neither cgroup2 nor a v1 freezer: no way to kill a sandbox's processes for sure")
	}
	return h, nil
}

// hasCgroupKill says whether the kernel has cgroup.kill (and so
// cgroup.freeze), which every non-root cgroup2 directory then holds. The
// root cgroup has neither file, so for a caller in the root (a hybrid
// host's unified tree often has nothing else) the kernel's version
// decides: cgroup.kill came with 5.14.
func hasCgroupKill(v2, self string) bool {
	if self != "/" && self != "" {
		_, err := os.Stat(filepath.Join(v2, self, "cgroup.kill"))
		return err == nil
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 5 || (major == 5 && minor >= 14)
}

// swapLimited reports whether the memory controller accounts swap (v1
// memory.memsw.*, with swapaccount; cgroup2 memory.swap.max, on a kernel
// with swap): only then can a memory limit keep a sandbox from swapping
// past it, and only then may it be set.
func (h *hierarchy) swapLimited() bool {
	var p string
	switch {
	case h.mode == cgroups.Unified:
		p = filepath.Join(h.v2, h.v2Self, "memory.swap.max")
	case h.hasV1(cgroup1.Memory):
		p = filepath.Join(v1Root, string(cgroup1.Memory), h.v1Self[cgroup1.Memory], "memory.memsw.limit_in_bytes")
	default:
		return false
	}
	_, err := os.Stat(p)
	return err == nil
}

func (h *hierarchy) hasV1(n cgroup1.Name) bool {
	for _, c := range h.v1 {
		if c == n {
			return true
		}
	}
	return false
}

// limits are a sandbox's resource limits; zero means none.
type limits struct {
	MemoryMax int64
	PidsMax   int64
}

// group is one sandbox's cgroups: the same relative path (rel) in the
// cgroup2 hierarchy and in each v1 controller, below the caller's own.
type group struct {
	h   *hierarchy
	rel string // arbor-jail/<label>/<name>

	v2 *cgroup2.Manager // nil on a v1-only host
	v1 cgroup1.Cgroup   // nil on a pure cgroup2 host
}

func (h *hierarchy) v2Path(rel string) string { return filepath.Join(h.v2, h.v2Self, rel) }

func (h *hierarchy) v1Path(n cgroup1.Name, rel string) string {
	return filepath.Join(v1Root, string(n), h.v1Self[n], rel)
}

func (h *hierarchy) v1Hierarchy() ([]cgroup1.Subsystem, error) {
	var out []cgroup1.Subsystem
	for _, n := range h.v1 {
		switch n {
		case cgroup1.Memory:
			out = append(out, cgroup1.NewMemory(v1Root))
		case cgroup1.Pids:
			out = append(out, cgroup1.NewPids(v1Root))
		case cgroup1.Freezer:
			out = append(out, cgroup1.NewFreezer(v1Root))
		}
	}
	return out, nil
}

// newGroup makes the cgroups of rel, without limits (setLimits sets
// them). On failure nothing is left.
func (h *hierarchy) newGroup(rel string) (_ *group, err error) {
	g := &group{h: h, rel: rel}
	defer func() {
		if err != nil {
			g.remove()
		}
	}()
	if h.v2 != "" {
		m, err := cgroup2.NewManager(h.v2, filepath.Join(h.v2Self, rel), &cgroup2.Resources{})
		if err != nil {
			return nil, fmt.Errorf("cgroup2 %s: %w", rel, err)
		}
		g.v2 = m
	}
	if len(h.v1) > 0 {
		c, err := cgroup1.New(cgroup1.NestedPath(rel), &specs.LinuxResources{}, cgroup1.WithHierarchy(h.v1Hierarchy))
		if err != nil {
			return nil, fmt.Errorf("cgroup v1 %s: %w", rel, err)
		}
		g.v1 = c
	}
	return g, nil
}

// dirs are the directories of rel in every hierarchy used.
func (h *hierarchy) dirs(rel string) []string {
	var out []string
	if h.v2 != "" {
		out = append(out, h.v2Path(rel))
	}
	for _, n := range h.v1 {
		out = append(out, h.v1Path(n, rel))
	}
	return out
}

// adopt moves pid (a process alone in its cgroups, such as a spare's
// init at its gate) into the group in every hierarchy.
func (g *group) adopt(pid int) error {
	if g.v2 != nil {
		if err := g.v2.AddProc(uint64(pid)); err != nil {
			return fmt.Errorf("move to cgroup2: %w", err)
		}
	}
	return g.attachV1(pid)
}

// setLimits applies lim (before any user process runs).
func (g *group) setLimits(lim limits) error {
	if lim == (limits{}) {
		return nil
	}
	if g.h.mode == cgroups.Unified {
		res := &cgroup2.Resources{}
		if lim.MemoryMax > 0 {
			res.Memory = &cgroup2.Memory{Max: &lim.MemoryMax}
			if g.h.swapLimited() {
				// The limit is of memory, not of what swap can hold
				// beside it: past it a process is killed, not swapped.
				var none int64
				res.Memory.Swap = &none
			}
		}
		if lim.PidsMax > 0 {
			res.Pids = &cgroup2.Pids{Max: lim.PidsMax}
		}
		if err := g.v2.ToggleControllers(res.EnabledControllers(), cgroup2.Enable); err != nil {
			return fmt.Errorf("cgroup2 controllers: %w", err)
		}
		if err := g.v2.Update(res); err != nil {
			return fmt.Errorf("cgroup2 limits: %w", err)
		}
		return nil
	}
	if lim.MemoryMax > 0 && !g.h.hasV1(cgroup1.Memory) {
		return fmt.Errorf("%w: a memory limit needs the memory controller, which this host lacks", api.ErrUnavailable)
	}
	if lim.PidsMax > 0 && !g.h.hasV1(cgroup1.Pids) {
		return fmt.Errorf("%w: a pids limit needs the pids controller, which this host lacks", api.ErrUnavailable)
	}
	res := &specs.LinuxResources{}
	if lim.MemoryMax > 0 {
		res.Memory = &specs.LinuxMemory{Limit: &lim.MemoryMax}
		if g.h.swapLimited() {
			res.Memory.Swap = &lim.MemoryMax // memory and swap together: no swap
		}
	}
	if lim.PidsMax > 0 {
		res.Pids = &specs.LinuxPids{Limit: &lim.PidsMax}
	}
	if err := g.v1.Update(res); err != nil {
		return fmt.Errorf("cgroup v1 limits: %w", err)
	}
	return nil
}

// v2Dir opens the cgroup2 directory for CLONE_INTO_CGROUP.
func (g *group) v2Dir(sub string) (*os.File, error) {
	return os.OpenFile(filepath.Join(g.h.v2Path(g.rel), sub), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// attachV1 writes pid into every v1 controller's cgroup.procs.
func (g *group) attachV1(pid int) error {
	if g.v1 == nil {
		return nil
	}
	return g.v1.AddProc(uint64(pid))
}

// kill SIGKILLs every process of the group and its children: cgroup.kill
// where the host has it, else v1 freeze, SIGKILL each pid, thaw (a frozen
// process cannot fork, so the list is complete when it is read).
func (g *group) kill() error {
	if g.v2 != nil && g.h.v2Kill {
		if err := os.WriteFile(filepath.Join(g.h.v2Path(g.rel), "cgroup.kill"), []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("cgroup.kill: %w", err)
		}
		return nil
	}
	if g.v2 != nil && g.h.mode == cgroups.Unified {
		return g.v2.Kill() // the library's freeze, kill, thaw
	}
	if g.h.hasV1(cgroup1.Freezer) {
		if _, err := os.Stat(g.h.v1Path(cgroup1.Freezer, g.rel)); errors.Is(err, os.ErrNotExist) {
			return g.killListed()
		}
	}
	if g.v1 == nil || !g.h.hasV1(cgroup1.Freezer) {
		return fmt.Errorf("no way to kill: neither cgroup.kill nor a freezer")
	}
	if err := g.v1.Freeze(); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("freeze for kill: %w", err)
	}
	procs, err := g.v1.Processes(cgroup1.Freezer, true)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, p := range procs {
		if err := unix.Kill(p.Pid, unix.SIGKILL); err != nil && err != unix.ESRCH {
			return fmt.Errorf("kill %d: %w", p.Pid, err)
		}
	}
	if err := g.v1.Thaw(); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("thaw after kill: %w", err)
	}
	return nil
}

// killListed SIGKILLs every process the group's directories list, with
// no freeze: it is for a group without its freezer directory, which only
// a crash inside newGroup leaves (Reap finds it), before any process was
// placed in it.
func (g *group) killListed() error {
	for _, d := range g.h.dirs(g.rel) {
		b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				continue
			}
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && err != unix.ESRCH {
				return fmt.Errorf("kill %d: %w", pid, err)
			}
		}
	}
	return nil
}

// populated reports whether any process is left in the group.
func (g *group) populated() (bool, error) {
	if g.v2 != nil {
		b, err := os.ReadFile(filepath.Join(g.h.v2Path(g.rel), "cgroup.events"))
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return bytes.Contains(b, []byte("populated 1")), nil
	}
	n, err := g.countV1()
	return n > 0, err
}

func (g *group) countV1() (int, error) {
	procs, err := g.v1.Processes(g.h.v1[0], true)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	return len(procs), err
}

// waitEmpty polls until no process is left, up to d. Dying processes
// leave the cgroup in well under a millisecond each; the poll starts
// fine and backs off.
func (g *group) waitEmpty(d time.Duration) error {
	deadline := time.Now().Add(d)
	sleep := 50 * time.Microsecond
	for {
		pop, err := g.populated()
		if err != nil {
			return err
		}
		if !pop {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cgroup %s still has processes after %v", g.rel, d)
		}
		time.Sleep(sleep)
		if sleep < 500*time.Microsecond {
			sleep *= 2
		}
	}
}

func (g *group) freeze() error {
	if g.v2 != nil && g.h.v2Kill { // cgroup.freeze came with 5.2, cgroup.kill with 5.14
		return g.v2.Freeze()
	}
	if g.v1 != nil && g.h.hasV1(cgroup1.Freezer) {
		return g.v1.Freeze()
	}
	if g.v2 != nil {
		return g.v2.Freeze()
	}
	return fmt.Errorf("no freezer")
}

func (g *group) thaw() error {
	if g.v2 != nil && g.h.v2Kill {
		return g.v2.Thaw()
	}
	if g.v1 != nil && g.h.hasV1(cgroup1.Freezer) {
		return g.v1.Thaw()
	}
	if g.v2 != nil {
		return g.v2.Thaw()
	}
	return fmt.Errorf("no freezer")
}

// memory is the group's charged memory in bytes: v1 memory where the
// host has it (a hybrid host's v2 has no memory controller), else v2.
func (g *group) memory() (int64, error) {
	var p string
	switch {
	case g.v1 != nil && g.h.hasV1(cgroup1.Memory):
		p = filepath.Join(g.h.v1Path(cgroup1.Memory, g.rel), "memory.usage_in_bytes")
	case g.v2 != nil && g.h.mode == cgroups.Unified:
		p = filepath.Join(g.h.v2Path(g.rel), "memory.current")
	default:
		return 0, fmt.Errorf("no memory controller on this host")
	}
	return readInt(p)
}

// oomKills is how many of the group's processes the kernel killed for its
// memory limit, its descendants' included: oom_kill in v1's
// memory.oom_control (kernels from 4.13) where the host has the v1 memory
// controller, else in cgroup2's memory.events.
func (g *group) oomKills() (int64, error) {
	var p string
	switch {
	case g.v1 != nil && g.h.hasV1(cgroup1.Memory):
		p = filepath.Join(g.h.v1Path(cgroup1.Memory, g.rel), "memory.oom_control")
	case g.v2 != nil && g.h.mode == cgroups.Unified:
		p = filepath.Join(g.h.v2Path(g.rel), "memory.events")
	default:
		return 0, fmt.Errorf("no memory controller on this host")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("%s: no oom_kill count (kernel before 4.13?)", p)
}

// pids counts the group's processes (not threads: a v1 pids.current
// counts tasks).
func (g *group) pids() (int, error) {
	if g.v2 != nil {
		procs, err := g.v2.Procs(true)
		return len(procs), err
	}
	return g.countV1()
}

func readInt(p string) (int64, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// remove deletes the group's cgroups, deepest first (exec leaves live
// below a sandbox's cgroup2 directory). Missing ones are not an error.
func (g *group) remove() error {
	var errs []error
	if g.h.v2 != "" {
		errs = append(errs, rmTree(g.h.v2Path(g.rel)))
	}
	for _, n := range g.h.v1 {
		errs = append(errs, rmTree(g.h.v1Path(n, g.rel)))
	}
	return errors.Join(errs...)
}

// rmTree removes a cgroup directory and the cgroups below it. A cgroup
// directory's files cannot be unlinked, only the directory rmdir'ed, so
// os.RemoveAll does not fit.
func rmTree(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		if e.IsDir() {
			errs = append(errs, rmTree(filepath.Join(dir, e.Name())))
		}
	}
	for i := 0; ; i++ {
		err = unix.Rmdir(dir)
		// A cgroup whose last process just died can stay busy for a
		// moment until the kernel has released it.
		if err != unix.EBUSY || i == 100 {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	if err != nil && err != unix.ENOENT {
		errs = append(errs, &os.PathError{Op: "rmdir", Path: dir, Err: err})
	}
	return errors.Join(errs...)
}

// list names the directories directly below rel in every hierarchy we
// use: the sandboxes of a label, for Reap.
func (h *hierarchy) list(rel string) ([]string, error) {
	seen := map[string]bool{}
	var dirs []string
	if h.v2 != "" {
		dirs = append(dirs, h.v2Path(rel))
	}
	for _, n := range h.v1 {
		dirs = append(dirs, h.v1Path(n, rel))
	}
	var out []string
	for _, d := range dirs {
		ents, err := os.ReadDir(d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if e.IsDir() && !seen[e.Name()] {
				seen[e.Name()] = true
				out = append(out, e.Name())
			}
		}
	}
	return out, nil
}

// loadGroup addresses an existing group (for Reap), creating nothing.
func (h *hierarchy) loadGroup(rel string) (*group, error) {
	g := &group{h: h, rel: rel}
	if h.v2 != "" {
		m, err := cgroup2.Load(filepath.Join(h.v2Self, rel), cgroup2.WithMountpoint(h.v2))
		if err != nil {
			return nil, err
		}
		g.v2 = m
	}
	if len(h.v1) > 0 {
		c, err := cgroup1.Load(cgroup1.NestedPath(rel), cgroup1.WithHierarchy(h.v1Hierarchy))
		if err != nil && !errors.Is(err, cgroup1.ErrCgroupDeleted) {
			return nil, err
		}
		g.v1 = c
	}
	return g, nil
}
