// Package workspace is the daemon's set of mounted stores: the workspace
// mounts behind `arbor mount` (a base directory's branches at a mountpoint,
// remembered across restarts) and the mounts that hold a tree's node files.
//
// Several mounts of one base share one store, so a commit through one is
// seen by all. Every base and mountpoint a request names is checked with
// access.Rules as the requester (access.FromContext) before anything is
// opened or made there, and a mount is then driven only by the uid that
// made it, root or the daemon's uid; a restart checks its recorded mounts
// again as their owners. Manager.mu guards the tables; the store and each mount have
// their own locks and Manager never holds its lock across a FUSE request.
package workspace

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/cowfs"
	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/store"
)

// Config configures a Manager.
type Config struct {
	Home        string             // the daemon's state directory
	Passthrough *bool              // see cowfs.Config; nil: when root
	Aborter     *fusemount.Aborter // see cowfs.Config
	Logger      *slog.Logger
	// Access checks the paths a request names against the requester's
	// credentials (access.FromContext); nil means access.New for Home.
	Access *access.Rules
}

// Manager owns every workspace mount.
type Manager struct {
	cfg Config
	log *slog.Logger

	rules *access.Rules
	self  uint32 // the daemon's euid: may act on every mount, as root may

	mu     sync.Mutex             // guards stores, mounts, owners and trees, and the record file
	stores map[string]*shared     // by absolute base path
	mounts map[string]*cowfs.FS   // by absolute mountpoint
	owners map[string]access.Cred // by mountpoint: who mounted it
	trees  map[string]string      // the bases of open tree files -> the tree's directory
}

// shared is one store and the mounts that show it.
type shared struct {
	st *store.Store

	mu     sync.Mutex // guards mounts; never held across a FUSE call or an unmount
	mounts map[string]*cowfs.FS
}

func (sh *shared) add(mp string, f *cowfs.FS) {
	sh.mu.Lock()
	sh.mounts[mp] = f
	sh.mu.Unlock()
}

// points lists the mountpoints that show the store, sorted.
func (sh *shared) points() []string {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	out := make([]string, 0, len(sh.mounts))
	for mp := range sh.mounts {
		out = append(out, mp)
	}
	sort.Strings(out)
	return out
}

func (sh *shared) remove(mp string) (left int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	delete(sh.mounts, mp)
	return len(sh.mounts)
}

// record is a mount as remembered in Home/mounts.json. Cred is who
// mounted it: a restart checks the paths again as them (a record without
// one is checked as root).
type record struct {
	Base       string       `json:"base"`
	Mountpoint string       `json:"mountpoint"`
	Branch     string       `json:"branch"`
	Cred       *access.Cred `json:"cred,omitempty"`
}

// New makes the manager and re-establishes the mounts it had before a
// restart (or a SIGKILL, which leaves dead FUSE mounts that it detaches).
func New(cfg Config) (*Manager, error) {
	if cfg.Home == "" {
		return nil, api.Errorf(api.ErrBadRequest, "workspace: Home is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rules := cfg.Access
	if rules == nil {
		var err error
		if rules, err = access.New(access.Config{Home: cfg.Home}); err != nil {
			return nil, err
		}
	}
	m := &Manager{cfg: cfg, log: log, rules: rules, self: uint32(os.Geteuid()),
		stores: map[string]*shared{}, mounts: map[string]*cowfs.FS{}, owners: map[string]access.Cred{}, trees: map[string]string{}}
	recs, err := m.readRecords()
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		cred := access.Cred{}
		if r.Cred != nil {
			cred = *r.Cred
		}
		if _, _, err := m.checkAndMount(cred, r.Base, r.Mountpoint, r.Branch); err != nil {
			log.Warn("restore mount", "base", r.Base, "mountpoint", r.Mountpoint, "err", err)
		}
	}
	if err := m.writeRecords(); err != nil {
		log.Warn("save mounts", "err", err)
	}
	return m, nil
}

func (m *Manager) recordsPath() string { return recordsPath(m.cfg.Home) }

func recordsPath(home string) string { return filepath.Join(home, "mounts.json") }

func (m *Manager) readRecords() ([]record, error) { return readRecords(m.cfg.Home) }

func readRecords(home string) ([]record, error) {
	data, err := os.ReadFile(recordsPath(home))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var recs []record
	if err := json.Unmarshal(data, &recs); err != nil {
		return nil, fmt.Errorf("workspace: %s: %w", recordsPath(home), err)
	}
	return recs, nil
}

// RememberedMounts lists the mountpoints the daemon of home had mounted
// when it last saved its table: the ones it re-establishes when it starts.
func RememberedMounts(home string) ([]string, error) {
	recs, err := readRecords(home)
	if err != nil {
		return nil, err
	}
	var mps []string
	for _, r := range recs {
		mps = append(mps, r.Mountpoint)
	}
	return mps, nil
}

// sourcePrefix starts the source (fsname) of every mount a daemon makes;
// MountSource and ParseSource are the whole format.
const sourcePrefix = "arbor:"

// MountSource is the source (FUSE fsname, shown by mount(8) and in
// /proc/self/mountinfo) of a mount of base made by the daemon of home:
// "arbor:HOME:BASE". It names the daemon that owns a mount, so a command
// run with another ARBOR_HOME can say which daemon to ask.
func MountSource(home, base string) string { return sourcePrefix + home + ":" + base }

// ParseSource splits a MountSource; ok is false for any other source. Both
// paths are absolute, so the base starts at the first ":/" (a home with
// ":/" in it is not told apart).
func ParseSource(src string) (home, base string, ok bool) {
	rest, ok := strings.CutPrefix(src, sourcePrefix)
	if !ok {
		return "", "", false
	}
	i := strings.Index(rest, ":/")
	if i <= 0 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}

// writeRecords saves the mount table atomically. The caller holds m.mu (or
// is New).
func (m *Manager) writeRecords() error {
	recs := []record{}
	for mp, f := range m.mounts {
		cred := m.owners[mp]
		recs = append(recs, record{Base: f.Store().Base(), Mountpoint: mp, Branch: f.Current(), Cred: &cred})
	}
	sort.Slice(recs, func(i, j int) bool { return recs[i].Mountpoint < recs[j].Mountpoint })
	data, err := json.MarshalIndent(recs, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(m.recordsPath(), data)
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// storeDir is where the store of a base lives.
func (m *Manager) storeDir(base string) string {
	h := sha256.Sum256([]byte(base))
	return filepath.Join(m.cfg.Home, "ws", hex.EncodeToString(h[:8]))
}

// checkAndMount checks a base and a mountpoint as cred (access.Rules,
// without holding m.mu: the checks open paths) and mounts. The same base
// already mounted there, by cred or for cred to use, is no error: it
// returns that mount and already. The caller does not hold m.mu.
func (m *Manager) checkAndMount(cred access.Cred, baseArg, mpArg, branch string) (f *cowfs.FS, already bool, err error) {
	base, err := m.base(baseArg)
	if err != nil {
		return nil, false, fmt.Errorf("mount: base: %w", err)
	}
	bd, err := m.rules.Base(cred, base)
	if err != nil {
		return nil, false, fmt.Errorf("mount: %w", err)
	}
	base = bd.Path
	bd.Close()
	if err := m.notInMount(base); err != nil {
		return nil, false, fmt.Errorf("mount: base: %w", err)
	}
	mp, err := m.mountpoint(mpArg)
	if err != nil {
		return nil, false, fmt.Errorf("mount: mountpoint: %w", err)
	}
	m.mu.Lock()
	knownF, known := m.mounts[mp]
	var owned error
	if known {
		owned = m.mayUseAs(cred, api.OpWsMount, mp)
	}
	m.mu.Unlock()
	switch { // never open one of our own mounts (see mountpoint)
	case known && knownF.Store().Base() == base && owned == nil:
		// The same base at the same place (a restarted daemon
		// re-established it): nothing to do, unless another branch was
		// asked for.
		if cur := knownF.Current(); branch != "" && branch != cur {
			return nil, false, api.Errorf(api.ErrExists,
				"mount %s: already mounted, showing %s, not %s (arbor switch changes the branch shown)", mp, cur, branch)
		}
		return knownF, true, nil
	case known && knownF.Store().Base() == base:
		return nil, false, owned
	case known:
		return nil, false, api.Errorf(api.ErrExists, "mount %s: already mounted (base %s)", mp, knownF.Store().Base())
	}
	if inside(mp, base) || inside(base, mp) { // before a missing mountpoint is made in the base
		return nil, false, api.Errorf(api.ErrBadRequest, "mount: mountpoint %s and base %s must not contain each other", mp, base)
	}
	fusemount.DetachStale(mp)
	dir, err := m.rules.Mountpoint(cred, mp)
	if err != nil {
		return nil, false, fmt.Errorf("mount: %w", err)
	}
	defer dir.Close() // the mount, once made, holds the directory
	m.mu.Lock()
	defer m.mu.Unlock()
	f, err = m.mount(base, dir, branch, cred.UID)
	if err != nil {
		return nil, false, err
	}
	m.owners[dir.Path] = cred
	return f, false, nil
}

// mount mounts base at the checked directory showing branch. The caller
// holds m.mu.
func (m *Manager) mount(base string, dir *access.Dir, branch string, owner uint32) (*cowfs.FS, error) {
	mp := dir.Path
	if _, ok := m.mounts[mp]; ok {
		return nil, api.Errorf(api.ErrExists, "mount %s: already mounted", mp)
	}
	if err := m.holdable(base, ""); err != nil {
		return nil, fmt.Errorf("mount: %w", err)
	}
	if err := m.outsideBases(mp); err != nil {
		return nil, fmt.Errorf("mount: %w", err)
	}
	if inside(mp, base) || inside(base, mp) {
		return nil, api.Errorf(api.ErrBadRequest, "mount: mountpoint %s and base %s must not contain each other", mp, base)
	}
	if err := m.apart(base); err != nil {
		return nil, fmt.Errorf("mount: %w", err)
	}
	if inside(mp, m.cfg.Home) || inside(m.cfg.Home, mp) {
		return nil, api.Errorf(api.ErrBadRequest, "mount: mountpoint %s and the daemon's home %s must not contain each other", mp, m.cfg.Home)
	}
	sh, err := m.share(base)
	if err != nil {
		return nil, err
	}
	if branch == "" {
		branch = store.Main
	}
	if b, err := sh.st.Branch(branch); err != nil || sh.st.IsStale(b) {
		branch = store.Main
	}
	f, err := cowfs.Mount(cowfs.Config{
		Store: sh.st, Mountpoint: mp, MountDir: dir.File(), Branch: branch, Passthrough: m.cfg.Passthrough, Aborter: m.cfg.Aborter, Logger: m.log,
		Owner:  owner,
		FsName: MountSource(m.cfg.Home, base),
		OnCommit: func(res store.CommitResult, child string) {
			m.others(sh, mp, func(o *cowfs.FS) { o.Committed(res, child) })
		},
		OnAbort: func(dropped []string, parent string) {
			m.others(sh, mp, func(o *cowfs.FS) { o.Aborted(dropped, parent) })
		},
	})
	if err != nil {
		m.unshare(base, sh)
		return nil, err
	}
	sh.add(mp, f)
	m.mounts[mp] = f
	return f, nil
}

// One store per base: the stores over a base are the workspace mounts'
// one (shared by every mount of that base) or one tree's, never both, and
// no held base lies inside another. Two stores over one base break
// snapshot isolation: a commit into main through one changes what a fork
// held by the other reads, since each store's origin copy-on-write knows
// only its own snapshots. The store's own lock on the base (store.Open)
// refuses a second store from anywhere else on the host.

// holdable refuses a base that overlaps a base held by a workspace mount or
// by a tree other than treeDir (which may reopen its own), naming the
// holder, and a base with one of Arbor's FUSE mounts inside it (a view of
// the base would contain a view of itself). The caller holds m.mu.
func (m *Manager) holdable(base, treeDir string) error {
	for b, sh := range m.stores {
		if treeDir == "" && b == base {
			continue // the workspace mounts share their store
		}
		if inside(base, b) || inside(b, base) {
			return api.Errorf(api.ErrExists, "base %s: %s is the base of workspace mount(s) %s (one store per base)", base, b, strings.Join(sh.points(), ", "))
		}
	}
	for b, dir := range m.trees {
		if dir == treeDir {
			continue
		}
		if inside(base, b) || inside(b, base) {
			return api.Errorf(api.ErrExists, "base %s: %s is the base of tree %s (one store per base)", base, b, filepath.Base(dir))
		}
	}
	for _, mt := range fusemount.Under(base) {
		if mt.IsFUSE() {
			return api.Errorf(api.ErrBadRequest, "base %s holds a FUSE mount at %s (a base with a mount inside it would show itself)", base, mt.Point)
		}
	}
	return nil
}

// outsideBases refuses a mountpoint inside a base held here (its mount
// would show inside that base's views). The caller holds m.mu.
func (m *Manager) outsideBases(mp string) error {
	for b := range m.stores {
		if inside(mp, b) {
			return api.Errorf(api.ErrBadRequest, "mountpoint %s is inside %s, the base of a workspace mount", mp, b)
		}
	}
	for b, dir := range m.trees {
		if inside(mp, b) {
			return api.Errorf(api.ErrBadRequest, "mountpoint %s is inside %s, the base of tree %s", mp, b, filepath.Base(dir))
		}
	}
	return nil
}

// inside reports whether path p is dir or below it (both clean and absolute).
func inside(p, dir string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

// apart refuses a base that contains the daemon's home or lies inside it:
// the store's own layers and metadata would be writable through main.
func (m *Manager) apart(base string) error {
	if inside(m.cfg.Home, base) || inside(base, m.cfg.Home) {
		return api.Errorf(api.ErrBadRequest, "base %s and the daemon's home %s must not contain each other", base, m.cfg.Home)
	}
	return nil
}

// others runs fn on the other mounts of a store. It takes only the store's
// own lock, briefly: a hook runs inside a FUSE request, which an unmount
// holding m.mu may be waiting for.
func (m *Manager) others(sh *shared, self string, fn func(*cowfs.FS)) {
	sh.mu.Lock()
	var fss []*cowfs.FS
	for mp, f := range sh.mounts {
		if mp != self {
			fss = append(fss, f)
		}
	}
	sh.mu.Unlock()
	for _, f := range fss {
		fn(f)
	}
}

func (m *Manager) share(base string) (*shared, error) {
	if sh, ok := m.stores[base]; ok {
		return sh, nil
	}
	st, err := store.Open(store.Config{Dir: m.storeDir(base), Base: base, Logger: m.log})
	if err != nil {
		return nil, err
	}
	sh := &shared{st: st, mounts: map[string]*cowfs.FS{}}
	m.stores[base] = sh
	return sh, nil
}

func (m *Manager) unshare(base string, sh *shared) {
	sh.mu.Lock()
	n := len(sh.mounts)
	sh.mu.Unlock()
	if n == 0 {
		sh.st.Close()
		delete(m.stores, base)
	}
}

// Close unmounts every workspace (remembering them for the next start).
func (m *Manager) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var errs []error
	if err := m.writeRecords(); err != nil {
		errs = append(errs, err)
	}
	for mp, f := range m.mounts {
		if err := f.Unmount(true); err != nil {
			errs = append(errs, err)
		}
		delete(m.mounts, mp)
	}
	for base, sh := range m.stores {
		sh.st.Close()
		delete(m.stores, base)
	}
	return errors.Join(errs...)
}

func (m *Manager) get(mp string) (*cowfs.FS, error) {
	if mp == "" {
		return nil, api.Errorf(api.ErrBadRequest, "no mountpoint given")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	f, ok := m.mounts[filepath.Clean(mp)]
	if !ok {
		return nil, api.Errorf(api.ErrNotFound, "%s is not an arbor mount", mp)
	}
	return f, nil
}

func checkAbs(p string) error {
	if p == "" {
		return api.Errorf(api.ErrBadRequest, "empty path")
	}
	if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
		return api.Errorf(api.ErrBadRequest, "path %q must be absolute", p)
	}
	return nil
}

// mountpoint resolves a mountpoint argument without ever stat-ing one of
// our own mounts: a daemon blocked in a request to its own FUSE server
// cannot be killed (the kernel waits uninterruptibly for an answer only its
// own dead threads could give), and it costs a round trip per call. A known
// mountpoint is taken as is; otherwise symlinks are resolved in the parent
// directory only.
func (m *Manager) mountpoint(p string) (string, error) {
	if err := checkAbs(p); err != nil {
		return "", err
	}
	c := filepath.Clean(p)
	m.mu.Lock()
	_, ok := m.mounts[c]
	m.mu.Unlock()
	if ok || c == "/" {
		return c, nil
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(c)); err == nil {
		return filepath.Join(dir, filepath.Base(c)), nil
	}
	return c, nil
}

// base resolves a base argument; a base inside one of our mounts is refused
// (the store would read its layers through its own FUSE server).
func (m *Manager) base(p string) (string, error) {
	if err := checkAbs(p); err != nil {
		return "", err
	}
	c := filepath.Clean(p)
	if err := m.notInMount(c); err != nil {
		return "", err
	}
	r, err := filepath.EvalSymlinks(c)
	if err != nil {
		return c, nil // the mount reports a missing base
	}
	if err := m.notInMount(r); err != nil {
		return "", err
	}
	return r, nil
}

func (m *Manager) notInMount(p string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for mp := range m.mounts {
		if inside(p, mp) {
			return api.Errorf(api.ErrBadRequest, "base %s is inside the arbor mount %s", p, mp)
		}
	}
	return nil
}

// Do serves the ws_* ops.
func (m *Manager) Do(ctx context.Context, req api.Request) (api.Response, error) {
	switch req.Op {
	case api.OpWsMount:
		if err := checkAbs(req.Base); err != nil {
			return api.Response{}, fmt.Errorf("mount: base: %w", err)
		}
		if err := checkAbs(req.Mountpoint); err != nil {
			return api.Response{}, fmt.Errorf("mount: mountpoint: %w", err)
		}
		cred, ok := access.FromContext(ctx)
		if !ok {
			return api.Response{}, api.Errorf(api.ErrForbidden, "mount: the request carries no requester credentials")
		}
		f, already, err := m.checkAndMount(cred, req.Base, req.Mountpoint, req.Branch)
		if err != nil {
			return api.Response{}, err
		}
		if already {
			return api.Response{Status: "ws_mounted", Path: f.Mountpoint(), Branch: f.Current(), AlreadyMounted: true}, nil
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		if err := m.writeRecords(); err != nil {
			return api.Response{}, err
		}
		return api.Response{Status: "ws_mounted", Path: f.Mountpoint(), Branch: f.Current()}, nil
	case api.OpWsUnmount:
		mp, err := m.mountpoint(req.Mountpoint)
		if err != nil {
			return api.Response{}, err
		}
		m.mu.Lock()
		defer m.mu.Unlock()
		f, ok := m.mounts[mp]
		if !ok {
			return api.Response{}, api.Errorf(api.ErrNotFound, "%s is not an arbor mount", mp)
		}
		if err := m.mayUse(ctx, req.Op, mp); err != nil {
			return api.Response{}, err
		}
		if err := f.Unmount(false); err != nil {
			return api.Response{}, err
		}
		delete(m.mounts, mp)
		delete(m.owners, mp)
		base := f.Store().Base()
		sh := m.stores[base]
		sh.remove(mp)
		m.unshare(base, sh)
		return api.Response{Status: api.StatusOK}, m.writeRecords()
	case api.OpWsMounts:
		m.mu.Lock()
		defer m.mu.Unlock()
		resp := api.Response{Status: "ws_mounts", Mounts: []api.Mount{}}
		for mp, f := range m.mounts {
			resp.Mounts = append(resp.Mounts, api.Mount{Mountpoint: mp, Base: f.Store().Base(), Branch: f.Current()})
		}
		sort.Slice(resp.Mounts, func(i, j int) bool { return resp.Mounts[i].Mountpoint < resp.Mounts[j].Mountpoint })
		return resp, nil
	}
	mp, err := m.mountpoint(req.Mountpoint)
	if err != nil {
		return api.Response{}, err
	}
	f, err := m.get(mp)
	if err != nil {
		return api.Response{}, err
	}
	m.mu.Lock()
	err = m.mayUse(ctx, req.Op, filepath.Clean(mp))
	m.mu.Unlock()
	if err != nil {
		return api.Response{}, err
	}
	st := f.Store()
	switch req.Op {
	case api.OpWsCreate:
		if err := f.Create(req.Branch, req.Parent, req.QuotaBytes); err != nil {
			return api.Response{}, err
		}
		m.saveCurrent()
		return api.Response{Status: "ws_created", Branch: req.Branch}, nil
	case api.OpWsCommit:
		durable := req.Durable == nil || *req.Durable
		res, err := f.Commit(req.Branch, durable)
		if err != nil {
			return api.Response{}, err
		}
		m.saveCurrent()
		return api.Response{Status: "ws_committed", Branch: res.Parent, Stale: res.Stale}, nil
	case api.OpWsAbort:
		if err := f.Abort(req.Branch); err != nil {
			return api.Response{}, err
		}
		m.saveCurrent()
		return api.Response{Status: api.StatusOK, Branch: f.Current()}, nil
	case api.OpWsSwitch:
		if err := f.Switch(req.Branch); err != nil {
			return api.Response{}, err
		}
		m.saveCurrent()
		return api.Response{Status: api.StatusOK, Branch: req.Branch}, nil
	case api.OpWsList:
		cur := f.Current()
		resp := api.Response{Status: "ws_branches", Branch: cur}
		for _, b := range st.Branches() {
			state := api.StateLive
			if b.Stale {
				state = api.StateStale
			}
			resp.Branches = append(resp.Branches, api.Branch{Name: b.Name, Parent: b.Parent, State: state, Current: b.Name == cur})
		}
		return resp, nil
	case api.OpWsDiff:
		name := req.Branch
		if name == "" {
			name = f.Current()
		}
		changes, err := st.Diff(name)
		if err != nil {
			return api.Response{}, err
		}
		resp := api.Response{Status: "ws_diff", Branch: name, Changes: []api.Change{}}
		for _, c := range changes {
			resp.Changes = append(resp.Changes, api.Change{Kind: c.Kind, Path: c.Path})
		}
		return resp, nil
	}
	return api.Response{}, api.Errorf(api.ErrBadRequest, "unknown op %q", req.Op)
}

// mayUse refuses an op on the mount at mp unless the requester mounted it,
// is root, or is the daemon's own uid. The caller holds m.mu.
func (m *Manager) mayUse(ctx context.Context, op, mp string) error {
	cred, ok := access.FromContext(ctx)
	if !ok {
		return api.Errorf(api.ErrForbidden, "%s %s: the request carries no requester credentials", op, mp)
	}
	return m.mayUseAs(cred, op, mp)
}

// mayUseAs is mayUse for the requester cred.
func (m *Manager) mayUseAs(cred access.Cred, op, mp string) error {
	owner := m.owners[mp]
	if cred.UID == 0 || cred.UID == m.self || cred.UID == owner.UID {
		return nil
	}
	return api.Errorf(api.ErrForbidden, "%s %s: the mount belongs to uid %d; %s may not use it", op, mp, owner.UID, cred)
}

func (m *Manager) saveCurrent() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.writeRecords(); err != nil {
		m.log.Warn("save mounts", "err", err)
	}
}
