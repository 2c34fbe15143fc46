// Package workspace is the dir backend's files layer: one store per tree,
// over the tree's base directory, mounted without control files under the
// tree's directory (TreeFiles), and the views of a tree that arbor mount
// makes (TreeFiles.MountView: a store's branches at a mountpoint of the
// requester's, with BranchFS's control files served by the engine).
//
// One store per base: the Manager refuses a base that overlaps one a tree
// holds. Every base and mountpoint a request names is checked with
// access.Rules as the requester (access.FromContext) before anything is
// opened or made there. Manager.mu guards the tables; the stores and the
// mounts have their own locks and Manager never holds its lock across a
// FUSE request.
package workspace

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/cowfs"
	"github.com/arbor-dev/arbor/internal/fusemount"
)

// Config configures a Manager.
type Config struct {
	Home        string             // the daemon's state directory
	Passthrough *bool              // see cowfs.Config; nil: when root
	Transport   string             // see cowfs.Config; "": auto
	Aborter     *fusemount.Aborter // see cowfs.Config
	Logger      *slog.Logger
	// Access checks the paths a request names against the requester's
	// credentials (access.FromContext); nil means access.New for Home.
	Access *access.Rules
}

// Manager owns the trees' stores and mounts.
type Manager struct {
	cfg Config
	log *slog.Logger

	rules *access.Rules

	mu    sync.Mutex           // guards trees and views
	trees map[string]string    // the bases of open tree files -> the tree's directory
	views map[string]*cowfs.FS // the views mounted, by mountpoint
}

// New makes the manager.
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
	return &Manager{cfg: cfg, log: log, rules: rules, trees: map[string]string{}, views: map[string]*cowfs.FS{}}, nil
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

// ResolveBase is the real path of the base directory p, checked as the
// requester (access.FromContext; the daemon itself without one): the key
// by which a tree holds its base (engine.Config.ResolveBase).
func (m *Manager) ResolveBase(ctx context.Context, p string) (string, error) {
	cred, ok := access.FromContext(ctx)
	if !ok {
		cred = access.Self()
	}
	c, err := m.base(cred, p)
	if err != nil {
		return "", fmt.Errorf("base: %w", err)
	}
	d, err := m.rules.Base(cred, c)
	if err != nil {
		return "", err
	}
	defer d.Close()
	return d.Path, nil
}

// One store per base: a base is held by one tree, whose views (arbor
// mount) show it, and no held base lies inside another. Two stores over one base break
// snapshot isolation: a commit into main through one changes what a fork
// held by the other reads, since each store's origin copy-on-write knows
// only its own snapshots. The store's own lock on the base (store.Open)
// refuses a second store from anywhere else on the host.

// holdable refuses a base that overlaps a base held by a tree other than
// treeDir (which may reopen its own), naming the
// holder, and a base with one of Arbor's FUSE mounts inside it (a view of
// the base would contain a view of itself). The caller holds m.mu.
func (m *Manager) holdable(base, treeDir string) error {
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

func checkAbs(p string) error {
	if p == "" {
		return api.Errorf(api.ErrBadRequest, "empty path")
	}
	if !filepath.IsAbs(p) || strings.ContainsRune(p, 0) {
		return api.Errorf(api.ErrBadRequest, "path %q must be absolute", p)
	}
	return nil
}

// base resolves a base argument as cred would (so that a refusal never
// names what cred could not see); a base inside one of our mounts is
// refused (the store would read its layers through its own FUSE server).
func (m *Manager) base(cred access.Cred, p string) (string, error) {
	if err := checkAbs(p); err != nil {
		return "", err
	}
	c := filepath.Clean(p)
	if err := m.notInMount(c, p); err != nil {
		return "", err
	}
	r, err := m.rules.Resolve(cred, c)
	if err != nil {
		return c, nil // the access rules refuse it, as cred
	}
	if err := m.notInMount(r, p); err != nil {
		return "", err
	}
	return r, nil
}

// notInMount refuses a base p (asked for as asked) inside one of our views.
func (m *Manager) notInMount(p, asked string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for mp := range m.views {
		if inside(p, mp) {
			return api.Errorf(api.ErrBadRequest, "base %s is inside an arbor mount", asked)
		}
	}
	return nil
}
