package cowfs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/store"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Config configures a mount. The zero value of each optional field means its default.
type Config struct {
	Store      *store.Store
	Mountpoint string
	// MountDir, if set, is an O_PATH descriptor of the directory at
	// Mountpoint that the caller checked (access.Rules): as root the mount
	// is made on the descriptor, not the path (see mountat.go). The caller
	// keeps it; it is used only during Mount.
	MountDir *os.File
	Branch   string // shown at the root; default main
	// Passthrough serves opened files by FUSE passthrough; default: when
	// running as root (the kernel allows it only then).
	Passthrough *bool
	// Owner is the uid the control files belong to: they are 0644 and
	// theirs, so only the owner (and root) can write them, and an ioctl on
	// one from anyone else is refused (EACCES). The daemon's own uid may
	// too.
	Owner uint32
	// NoControl hides the .branchfs_ctl files, so that only the mount's
	// owner changes its branches (a tree's mount, whose branches are nodes).
	NoControl bool
	// Control, if set, serves what the control files are asked to do
	// (writes and ioctls) and the names /@NAME resolves, in place of the
	// store: the daemon's engine, so that a branch made through a control
	// file is a tree node like any other (budgets, events, audit).
	Control Control
	// Hooks the owner runs around control operations made through the
	// mount (so that a daemon can keep its other mounts of the same store in
	// step). Each may be nil.
	OnCommit func(res store.CommitResult, child string)
	OnAbort  func(dropped []string, parent string)
	// CacheTTL is how long the kernel may keep names, attributes and
	// directory listings without asking (default 30 s). Changes made
	// through any mount of the store reach it at once (see notify.go);
	// changes made to the base directory behind Arbor's back show after
	// at most this long.
	CacheTTL time.Duration
	// Aborter ends the mount's FUSE connection when a forced unmount finds
	// it busy (nil: one of its own, without a logger).
	Aborter *fusemount.Aborter
	Logger  *slog.Logger
	Debug   bool
	// FsName is the mount's source as mount(8) and /proc/self/mountinfo
	// show it; default the store's base directory.
	FsName string
	// Transport of the FUSE requests: TransportAuto (default),
	// TransportURing or TransportDev (transport.go).
	Transport string

	// viaFusermount mounts through fusermount3 even as root (tests of the
	// path every non-root daemon takes).
	viaFusermount bool
}

// FS is one mounted branchable view of a store.
type FS struct {
	st          *store.Store
	cfg         Config
	passthrough bool
	// localFS: the base and the layers are on filesystems whose close(2)
	// does nothing but close (no flush method: ext4, xfs, btrfs, tmpfs),
	// so a FLUSH of a passthrough descriptor has nothing to do.
	localFS bool
	// nameMax is the longest name the base and the layers hold (statfs's
	// f_namelen): a longer one is ENAMETOOLONG at its lookup, as on
	// those filesystems, wherever the branch would look for it.
	nameMax int
	control bool
	log     *slog.Logger
	server  *fuse.Server
	// dev is the mount's device number, when mounted on MountDir (mountAt):
	// such a mount is unmounted by unmountAt, go-fuse cannot.
	dev uint64
	// fusermounted: mounted by fusermount3 (not root), so unmounted by it
	// too; go-fuse knows only the descriptor (see fusermount.go).
	fusermounted bool
	// mnt is the mount as mountinfo listed it once mounted: the identity an
	// unmount checks before it acts by path.
	mnt  fusemount.Mount
	root *node

	mu      sync.Mutex // guards the fields below
	current string
	seq     int
	// rootGen counts the changes of what the root shows. rootNeg holds
	// the names the root's lookups answered as absent since the last one:
	// the kernel caches those (NegativeTimeout), and they are all it may
	// know under the root besides the root's children. Past maxRootNeg
	// names it is dropped and rootNegFull set: the next invalidation lists
	// the branch instead.
	rootGen     uint64
	rootNeg     map[string]struct{}
	rootNegFull bool

	nt    notifier // the store's events, turned into kernel invalidations
	kills kills    // requests whose caller lacks CAP_FSETID (killpriv.go)

	served struct{ reads, writes atomic.Int64 } // data requests the daemon served itself

	// releasing counts the RELEASEs in go-fuse's hands: our
	// handle.Release, then go-fuse's drop of the kernel inode's
	// passthrough backing file (see node.bind).
	releasing atomic.Int64
}

// releaseFS is go-fuse's bridge with its RELEASEs counted in
// FS.releasing, from before handle.Release to after go-fuse is done.
type releaseFS struct {
	fuse.RawFileSystem
	n *atomic.Int64
}

func (r *releaseFS) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	r.n.Add(1)
	defer r.n.Add(-1)
	r.RawFileSystem.Release(cancel, in)
}

// Served counts the READ and WRITE requests the daemon served itself (with
// passthrough the kernel does them, and both stay 0).
func (f *FS) Served() (reads, writes int64) { return f.served.reads.Load(), f.served.writes.Load() }

const (
	ctlName = ".branchfs_ctl"
	ctlIno  = 1<<63 - 2 // outside the real inode range of any filesystem here
	// BranchFS's ioctl numbers.
	ioctlCreate = 0x80806200 // _IOR('b', 0, char[128])
	ioctlCommit = 0x6201
	ioctlAbort  = 0x6202
)

// Mount mounts the store at cfg.Mountpoint and returns once the kernel shows it.
func Mount(cfg Config) (*FS, error) {
	if cfg.Store == nil || cfg.Mountpoint == "" {
		return nil, api.Errorf(api.ErrBadRequest, "cowfs: Store and Mountpoint are required")
	}
	if cfg.Branch == "" {
		cfg.Branch = store.Main
	}
	if cfg.Aborter == nil {
		cfg.Aborter = &fusemount.Aborter{}
	}
	if err := CheckTransport(cfg.Transport); err != nil {
		return nil, err
	}
	if cfg.Transport == "" {
		cfg.Transport = defaultTransport
	}
	if cfg.FsName == "" {
		cfg.FsName = cfg.Store.Base()
	}
	if _, err := cfg.Store.Branch(cfg.Branch); err != nil {
		return nil, fmt.Errorf("cowfs: %w", err)
	}
	root := os.Geteuid() == 0
	pt := root
	if cfg.Passthrough != nil {
		pt = *cfg.Passthrough && root
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &FS{st: cfg.Store, cfg: cfg, passthrough: pt, control: !cfg.NoControl, log: log, current: cfg.Branch,
		localFS: noFlushFS(cfg.Store.Base()) && noFlushFS(cfg.Store.Dir()),
		nameMax: min(nameMax(cfg.Store.Base()), nameMax(cfg.Store.Dir()))}
	f.root = &node{fs: f}
	// Set before fs.Mount: the kernel's first requests can come while it returns.
	f.root.root = &f.root.Inode
	ttl := cfg.CacheTTL
	if ttl <= 0 {
		ttl = defaultCacheTTL
	}
	opts := &fs.Options{
		EntryTimeout: &ttl, AttrTimeout: &ttl, NegativeTimeout: &ttl,
		MountOptions: fuse.MountOptions{
			FsName: cfg.FsName,
			Name:   "branchfs",
			// Strict: as root, mount and unmount with mount(2) and
			// umount2(2) only, so that a busy unmount fails with EBUSY
			// (go-fuse would retry through fusermount3 and return its
			// words instead).
			DirectMount:        root,
			DirectMountStrict:  root,
			AllowOther:         root,
			MaxWrite:           1 << 20,
			DisableReadDirPlus: true,
			Options:            []string{"default_permissions"},
			Debug:              cfg.Debug,
			IOUring:            cfg.Transport != TransportDev,
		},
		// The store keeps the real inode numbers; go-fuse must not invent its own.
		FirstAutomaticIno: 1 << 62,
		// Report mode 0 as 0, not as go-fuse's default 0644.
		NullPermissions: true,
	}
	if !pt {
		opts.MountOptions.DisabledCapabilities = fuse.CAP_PASSTHROUGH
	}
	// The daemon clears setuid and setgid itself (killpriv.go): the kernel
	// then sets SB_NOSEC and stops asking for security.capability before
	// every write (a GETXATTR round trip per write(2) otherwise: 4 KiB
	// writes took 23-27 µs each instead of 3).
	opts.MountOptions.ExtraCapabilities = fuse.CAP_HANDLE_KILLPRIV_V2
	// A descriptor served with FOPEN_DIRECT_IO (a writer near a store's
	// limit: newHandle) can still be mapped shared.
	opts.MountOptions.ExtraCapabilities |= fuse.CAP_DIRECT_IO_ALLOW_MMAP
	mountpoint := cfg.Mountpoint
	if !root || cfg.viaFusermount {
		// fusermount3 mounts; we keep its stderr (see fusermount.go).
		fd, err := fusermountMount(cfg.Mountpoint, &opts.MountOptions)
		if err != nil {
			return nil, fmt.Errorf("cowfs: %w", err)
		}
		mountpoint, f.fusermounted = "/dev/fd/"+itoa(fd), true
		// go-fuse tries a direct mount before it looks for /dev/fd/N, and
		// /dev/fd/N is /dev/fuse: that would mount a second FS there.
		opts.MountOptions.DirectMount, opts.MountOptions.DirectMountStrict = false, false
	}
	f.startNotifier() // before the kernel's first requests
	target := mountpoint
	atDir := cfg.MountDir != nil && root && !f.fusermounted
	if atDir {
		fd, err := mountAt(cfg.MountDir, &opts.MountOptions)
		if err != nil {
			f.stopNotifier()
			return nil, fmt.Errorf("cowfs: mount %s: %w", cfg.Mountpoint, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			f.stopNotifier()
			return nil, fmt.Errorf("cowfs: mount %s: %w", cfg.Mountpoint, err)
		}
		// go-fuse serves an already mounted /dev/fuse given as /dev/fd/N.
		target = fmt.Sprintf("/dev/fd/%d", fd)
		// Neither direct mount: go-fuse would mount(2) onto that path,
		// which is /dev/fuse itself.
		opts.MountOptions.DirectMount = false
		opts.MountOptions.DirectMountStrict = false
	}
	var raw fuse.RawFileSystem = &releaseFS{RawFileSystem: newDirFS(&killFS{RawFileSystem: fs.NewNodeFS(f.root, opts), kills: &f.kills}), n: &f.releasing}
	if wrapRawForTest != nil {
		raw = wrapRawForTest(raw)
	}
	srv, err := fuse.NewServer(raw, target, &opts.MountOptions)
	if err != nil {
		if atDir {
			unix.Unmount(cfg.Mountpoint, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		}
		f.stopNotifier()
		if f.fusermounted {
			fusermountUnmount(cfg.Mountpoint, true)
		}
		if _, serr := os.Stat("/dev/fuse"); serr != nil {
			// The host has no FUSE device at all: nothing the request can fix.
			return nil, fmt.Errorf("cowfs: mount %s: %w (/dev/fuse: %v; modprobe fuse): %w", cfg.Mountpoint, err, serr, api.ErrUnavailable)
		}
		return nil, fmt.Errorf("cowfs: mount %s: %w", cfg.Mountpoint, err)
	}
	go srv.Serve()
	err = srv.WaitMount()
	if err == nil {
		err = checkURing(cfg.Transport, srv.Transport())
	}
	if err == nil && atDir {
		// Where the mount is: the directory's name now (it cannot be
		// renamed while mounted on), which must be the name asked for.
		var real string
		if real, err = os.Readlink(fmt.Sprintf("/proc/self/fd/%d", cfg.MountDir.Fd())); err == nil {
			f.cfg.Mountpoint = real // to unmount it below if need be
			if f.dev, err = mountDev(real); err == nil && real != cfg.Mountpoint {
				err = fmt.Errorf("the directory moved to %s while it was mounted", real)
			}
		}
		if err == nil {
			err = pollHack(real)
		}
	}
	if err != nil {
		if atDir {
			f.server = srv
			if f.dev == 0 || f.unmountAt() != nil {
				// Unreachable by name: detach what the descriptor's
				// name shows, as a last resort, so no server lingers.
				unix.Unmount(f.cfg.Mountpoint, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
			}
			srv.Wait()
		} else if f.fusermounted {
			fusermountUnmount(cfg.Mountpoint, true)
		} else {
			srv.Unmount()
		}
		f.stopNotifier()
		return nil, fmt.Errorf("cowfs: mount %s: %w", cfg.Mountpoint, err)
	}
	f.server = srv
	if m, ok := fusemount.Find(f.cfg.Mountpoint); ok && m.IsFUSE() {
		f.mnt = m
	}
	f.log.Info("mounted", "mountpoint", f.cfg.Mountpoint, "branch", cfg.Branch, "fuse_transport", srv.Transport())
	return f, nil
}

func (f *FS) rootInode() *fs.Inode { return &f.root.Inode }

// noFlushFS reports whether dir is on a filesystem without a flush method
// (close of a descriptor on it cannot fail or write anything back).
func noFlushFS(dir string) bool {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return false
	}
	switch st.Type {
	case unix.EXT4_SUPER_MAGIC, unix.XFS_SUPER_MAGIC, unix.BTRFS_SUPER_MAGIC, unix.TMPFS_MAGIC:
		return true
	}
	return false
}

// nameMax is the longest name dir's filesystem takes (NAME_MAX if it
// does not say).
func nameMax(dir string) int {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil || st.Namelen <= 0 {
		return 255
	}
	return int(st.Namelen)
}

// openFlags are the FUSE open flags of h. The kernel sends a FLUSH at
// every close(2) unless FOPEN_NOFLUSH: a read-only descriptor has nothing
// to flush on any filesystem, nor has a passthrough one on a filesystem
// without a flush method (the kernel keeps no pages of it for us). POSIX
// locks are the kernel's own here (we implement no lock calls), so FLUSH
// has no locks to drop either.
func (f *FS) openFlags(h *handle) uint32 {
	var fl uint32
	if h.direct {
		fl = fuse.FOPEN_DIRECT_IO
	}
	if !h.write || (h.passthrough && f.localFS) {
		return fl | fuse.FOPEN_NOFLUSH
	}
	return fl
}

// newHandle makes the handle of a descriptor fd opened on real for node n
// of branch b. A branch with a quota is served without passthrough, so that
// its writes are counted. A descriptor opened for writing in a branch whose
// store has a limit never gets passthrough (store.Metered): a passthrough
// writer opened while there was room wrote on past the limit unseen (300 MB
// into a 100 MB budget), so every write is served here and refused with
// ENOSPC before it passes the limit. A reader gets passthrough while the
// limit has room (store.WritePassthrough). A served writer is direct: the kernel
// does not let one inode mix passthrough descriptors with page-cached ones
// (an open of the other kind fails with ETXTBSY), and direct I/O is neither;
// but a shared mapping of a direct descriptor puts the inode in cached mode,
// so while a direct descriptor is open every new one is direct too
// (node.addHandle).
func (f *FS) newHandle(fd int, n *node, b *store.Branch, res store.Res, write bool) *handle {
	h := &handle{fd: fd, n: n, br: b, real: res.Real, w: res.Writer, write: write}
	quota := f.st.QuotaOf(b) > 0
	switch {
	case !f.passthrough:
	case quota:
	case write && f.st.Metered(b):
		h.direct = true
	case f.st.WritePassthrough(b):
		h.passthrough = true
	default:
		// Near the store's limit every descriptor of the branch, a
		// reader's too, is served here with FOPEN_DIRECT_IO: a passthrough
		// open next to the metered writers failed with EIO now and then
		// (the POSIX suite's near-limit variant under load).
		h.direct = true
	}
	h.meter = write && f.st.Metered(b)
	h.metered = h.meter && !h.passthrough
	return h
}

// Passthrough reports whether opened files are served by FUSE passthrough.
func (f *FS) Passthrough() bool { return f.passthrough }

// Store is the store the mount shows.
func (f *FS) Store() *store.Store { return f.st }

// Mountpoint is where it is mounted.
func (f *FS) Mountpoint() string { return f.cfg.Mountpoint }

// Unmount unmounts; a busy mount fails with api.ErrBusy unless force,
// which aborts its connection and detaches it. Where the connection cannot
// be aborted (not root, no fusectl) the forced unmount detaches the mount
// and returns without waiting for the server's loops: they end when the
// process exits and the kernel closes its /dev/fuse descriptor.
func (f *FS) Unmount(force bool) error {
	mp := f.cfg.Mountpoint
	switch top, ok := fusemount.Find(mp); {
	case f.mnt.ID != 0 && !f.listed():
		// Detached by someone else (umount -l, fusermount -uz): it lives
		// on only while something holds it. Abort it, so that the loops
		// end either way.
		if err := f.cfg.Aborter.Abort(f.mnt); err != nil {
			f.stopNotifier()
			return nil // the loops end with the last user, or with the process
		}
		return f.wait()
	case f.mnt.ID != 0 && ok && top.ID != f.mnt.ID:
		// Another mount stacked on ours: acting by path would unmount
		// that one. Abort ours by its connection (fusectl), and leave the
		// dead mount under theirs.
		if !force {
			return api.Errorf(api.ErrBusy, "unmount %s: another filesystem (%s) is mounted on top of it", mp, top.FSType)
		}
		if err := f.cfg.Aborter.Abort(f.mnt); err != nil {
			f.stopNotifier()
			return fmt.Errorf("unmount %s: another filesystem (%s) is mounted on top of it, and %w", mp, top.FSType, err)
		}
		return f.wait()
	}
	var err error
	switch {
	case f.dev != 0:
		err = f.unmountAt()
	case f.fusermounted:
		err = fusermountUnmount(mp, false) // go-fuse knows only the descriptor
	default:
		err = f.unmountPath()
	}
	if err != nil && force && (f.dev == 0 || f.ours(mp)) {
		var aborted bool
		aborted, err = f.forceUnmount()
		if err == nil && !aborted {
			f.stopNotifier()
			return nil
		}
	}
	if err != nil {
		if fusemount.IsBusy(err) || (f.dev == 0 && os.Geteuid() != 0 && strings.Contains(err.Error(), "Device or resource busy")) {
			// fusermount3 (the unprivileged unmount) says busy only in
			// words: go-fuse returns its stderr.
			return api.Errorf(api.ErrBusy, "unmount %s: the mount is in use", mp)
		}
		return fmt.Errorf("unmount %s: %w", mp, err)
	}
	return f.wait()
}

// unmountPath unmounts a mount made as root on its path (a tree's own),
// retrying a busy one a few times as go-fuse does (the kernel can take a
// moment to see the last file closed). It is go-fuse's Server.Unmount
// without its unbounded wait for the loops: wait bounds that.
func (f *FS) unmountPath() error {
	var err error
	delay := time.Duration(0)
	for range 5 {
		if err = unix.Unmount(f.cfg.Mountpoint, unix.UMOUNT_NOFOLLOW); err == nil || !errors.Is(err, unix.EBUSY) {
			return err
		}
		delay = 2*delay + 5*time.Millisecond
		time.Sleep(delay)
	}
	return err
}

// loopsGrace is how long an unmounted mount's loops may take to end
// before its connection is aborted.
const loopsGrace = 2 * time.Second

// wait waits for the server's loops to end, then stops the notifier. The
// loops end when the kernel ends the connection, which an unmount here
// does not when the mount lives on elsewhere: a copy of it in another
// mount namespace (one made while it was mounted), or a lazily detached
// mount still in use. After loopsGrace the connection is aborted (the
// mount is known by its identity: f.mnt); where it cannot be, the loops
// are left to end with the process.
func (f *FS) wait() error {
	done := make(chan struct{})
	go func() { f.server.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(loopsGrace):
		if f.mnt.ID == 0 {
			f.log.Warn("cowfs: the unmounted mount's server goes on, and its connection is unknown: left to end with the process", "mountpoint", f.cfg.Mountpoint)
			break
		}
		if err := f.cfg.Aborter.Abort(f.mnt); err != nil {
			f.log.Warn("cowfs: the unmounted mount lives on elsewhere (another mount namespace?) and cannot be aborted: its server ends with the process", "mountpoint", f.cfg.Mountpoint, "err", err)
			break
		}
		select {
		case <-done:
		case <-time.After(loopsGrace):
			f.log.Warn("cowfs: the server's loops did not end after its connection was aborted", "mountpoint", f.cfg.Mountpoint)
		}
	}
	f.stopNotifier()
	return nil
}

// forceUnmount aborts the busy mount's connection (a detached mount lives
// on while a process holds a file or a cwd in it, and so would the
// server's loops) and detaches it. aborted says whether the loops will end.
func (f *FS) forceUnmount() (aborted bool, err error) {
	mp := f.cfg.Mountpoint
	m, ok := fusemount.Find(mp) // before the detach hides it
	if !ok || (f.dev != 0 && (m.Major != unix.Major(f.dev) || m.Minor != unix.Minor(f.dev))) {
		return false, fmt.Errorf("unmount %s: the path no longer leads to this mount", mp)
	}
	abortErr := f.cfg.Aborter.Abort(m)
	if top, ok := fusemount.Find(mp); ok && top.ID == m.ID { // a forced unmount may have unmounted it
		if err := fusemount.Detach(mp); err != nil {
			return false, err
		}
	}
	return abortErr == nil, nil
}

// listed reports whether our mount is still in the mount table.
func (f *FS) listed() bool {
	ms, err := fusemount.List()
	if err != nil {
		return true
	}
	for _, m := range ms {
		if m.ID == f.mnt.ID && m.Major == f.mnt.Major && m.Minor == f.mnt.Minor {
			return true
		}
	}
	return false
}

// Current is the branch the mount root shows.
func (f *FS) Current() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.current
}

func (f *FS) currentBranch() (*store.Branch, error) {
	return f.st.Branch(f.Current())
}

// Switch makes the mount root show name.
func (f *FS) Switch(name string) error {
	b, err := f.st.Branch(name)
	if err != nil {
		return fmt.Errorf("switch: %w", err)
	}
	if f.st.IsStale(b) {
		return api.Errorf(api.ErrStale, "switch %s: the branch is stale", name)
	}
	f.setCurrent(name)
	return nil
}

// Show makes the mount root show branch name: the owner of the mount's
// Control decided it (a switch, or a commit or abort that took the branch
// shown away).
func (f *FS) Show(name string) { f.setCurrent(name) }

func (f *FS) setCurrent(name string) {
	f.mu.Lock()
	old := f.current
	f.current = name
	f.mu.Unlock()
	if old != name {
		f.invalidateRoot()
	}
}

// Create forks parent (the current branch if empty) into name, with a
// storage quota if quota > 0, and, if the parent is what the root shows,
// switches the root to it (after the quota is in force).
func (f *FS) Create(name, parent string, quota int64) error {
	cur := f.Current()
	if parent == "" {
		parent = cur
	}
	if err := f.st.Fork(parent, name); err != nil {
		return err
	}
	if quota > 0 {
		if err := f.st.SetQuota(name, quota); err != nil {
			if aerr := f.st.Abort(name); aerr != nil {
				return errors.Join(err, aerr)
			}
			return err
		}
	}
	if parent == cur {
		f.setCurrent(name)
	}
	return nil
}

// NewName returns a fresh branch name for the CREATE ioctl.
func (f *FS) newName() string {
	for {
		f.mu.Lock()
		f.seq++
		n := fmt.Sprintf("branch-%d-%d", time.Now().UnixNano()%1e9, f.seq)
		f.mu.Unlock()
		if _, err := f.st.Branch(n); err != nil {
			return n
		}
	}
}

// Commit commits branch (the current one if empty) into its parent. A mount
// that showed it shows the parent afterwards.
func (f *FS) Commit(branch string, durable bool) (store.CommitResult, error) {
	if branch == "" {
		branch = f.Current()
	}
	res, err := f.st.Commit(branch, durable)
	if err != nil {
		return res, err
	}
	f.Committed(res, branch)
	if f.cfg.OnCommit != nil {
		f.cfg.OnCommit(res, branch)
	}
	return res, nil
}

// Committed brings the mount in step with a commit made elsewhere.
func (f *FS) Committed(res store.CommitResult, child string) {
	f.mu.Lock()
	cur := f.current
	if cur == child {
		f.current = res.Parent
	}
	f.mu.Unlock()
	// The root changed only if it shows the child, the parent, or a branch
	// the commit made stale. It is invalidated here, before the commit
	// returns; the other views by the events of the commit.
	if cur == child || cur == res.Parent || slices.Contains(res.Stale, cur) {
		f.invalidateRootNames(cur == child)
	}
}

// Abort drops branch (the current one if empty) and its subtree; a mount
// that showed one of them shows the branch's parent.
func (f *FS) Abort(branch string) error {
	if branch == "" {
		branch = f.Current()
	}
	b, err := f.st.Branch(branch)
	if err != nil {
		return fmt.Errorf("abort: %w", err)
	}
	parent := b.Parent
	dropped := f.st.Subtree(branch)
	if err := f.st.Abort(branch); err != nil {
		return err
	}
	f.Aborted(dropped, parent)
	if f.cfg.OnAbort != nil {
		f.cfg.OnAbort(dropped, parent)
	}
	return nil
}

// Aborted brings the mount in step with an abort made elsewhere.
func (f *FS) Aborted(dropped []string, parent string) {
	f.mu.Lock()
	hit := false
	for _, d := range dropped {
		if d == f.current {
			hit = true
		}
	}
	if hit {
		if parent == "" {
			parent = store.Main
		}
		f.current = parent
	}
	f.mu.Unlock()
	if hit {
		f.invalidateRoot()
	}
}

// invalidateRoot makes the kernel forget what it knows under the root (a
// switch or a commit changed what it shows) before it returns, so that the
// next access sees the new branch. What the kernel knows is the root's
// children (each lookup it cached made one) and the names it caches as
// absent (rootNeg); a name it knows neither way it asks about anyway. It
// takes no lock a FUSE request holds, and the kernel takes only the root
// directory's lock, which no control write holds, so it may run inside a
// request on the control file.
func (f *FS) invalidateRoot() { f.invalidateRootNames(true) }

// invalidateRootNames is invalidateRoot; with detach it also drops the
// root's children from go-fuse's tree (they show the branch the root
// showed: after a switch a lookup must make new ones). Without it (the root
// still shows the same branch) the nodes stay, so that a request the kernel
// sends on one before the invalidation lands still resolves.
func (f *FS) invalidateRootNames(detach bool) {
	r := f.rootInode()
	f.mu.Lock()
	f.rootGen++
	neg, full := f.rootNeg, f.rootNegFull
	f.rootNeg, f.rootNegFull = nil, false
	f.mu.Unlock()
	names := make(map[string]struct{}, len(neg)+8)
	for name := range r.Children() {
		if name != ctlName && !strings.HasPrefix(name, "@") {
			names[name] = struct{}{}
		}
	}
	for name := range neg {
		names[name] = struct{}{}
	}
	if full {
		if b, err := f.currentBranch(); err == nil {
			if ents, err := f.st.ReadDir(b, ""); err == nil {
				for _, e := range ents {
					names[e.Name] = struct{}{}
				}
			}
		}
	}
	for name := range names {
		if detach {
			r.RmChild(name)
		}
		r.NotifyEntry(name)
	}
	r.NotifyContent(0, 0)
}

// maxRootNeg bounds rootNeg.
const maxRootNeg = 4096

// rootGeneration is the count of changes of what the root shows; a root
// lookup reads it before it resolves.
func (f *FS) rootGeneration() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rootGen
}

// rootMissed records that a root lookup that started at generation gen
// found no name: the kernel will cache that, so the next invalidation must
// reach it. If the root changed meanwhile, the answer may be stale and must
// not be cached at all.
func (f *FS) rootMissed(name string, gen uint64, out *fuse.EntryOut) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case gen != f.rootGen:
		out.SetEntryTimeout(time.Nanosecond)
	case f.rootNegFull:
	case len(f.rootNeg) >= maxRootNeg:
		f.rootNeg, f.rootNegFull = nil, true
	default:
		if f.rootNeg == nil {
			f.rootNeg = map[string]struct{}{}
		}
		f.rootNeg[name] = struct{}{}
	}
}

// viewInode is the /@NAME node under a view root.
func (f *FS) viewInode(ctx context.Context, parent *node, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	branch := name
	if f.cfg.Control != nil {
		r, ok := f.cfg.Control.Resolve(name)
		if !ok {
			out.SetEntryTimeout(time.Nanosecond)
			return nil, syscall.ENOENT
		}
		branch = r
	}
	b, err := f.st.Branch(branch)
	if err == nil && parent.br != nil && b.Parent != parent.br.Name {
		err = syscall.ENOENT // /@NAME/@CHILD: only NAME's children
	}
	if err != nil {
		// Not cached: the branch may be made at any moment.
		out.SetEntryTimeout(time.Nanosecond)
		return nil, syscall.ENOENT
	}
	var st unix.Stat_t
	if err := f.st.Lstat(f.st.Base(), &st); err != nil {
		return nil, errno(err)
	}
	v := &node{fs: f, br: b, at: true}
	in := parent.NewInode(ctx, v, fs.StableAttr{Mode: syscall.S_IFDIR, Ino: 1<<62 + b.ID*2 + 1, Gen: 1})
	v.root = in
	at := ""
	if &parent.Inode != f.rootInode() {
		at = parent.Path(f.rootInode())
	}
	f.addView(join(at, "@"+name), branch)
	out.Attr.FromStat(sysStat(&st))
	out.Attr.Ino = in.StableAttr().Ino
	if f.st.IsStale(b) {
		out.SetEntryTimeout(time.Nanosecond)
		out.SetAttrTimeout(time.Nanosecond)
	}
	return in, 0
}

// mergedLinks sets the link count of the directory rel of b (resolved as
// res) when layers and the base merge into it: 2 plus its subdirectories
// in the view, not the count of any one real directory.
func (f *FS) mergedLinks(b *store.Branch, rel string, res store.Res, a *fuse.Attr) {
	if res.Depth == 0 && rel != "" {
		return // only the base holds it
	}
	if nl, merged, err := f.st.DirLinks(b, rel); err == nil && merged {
		a.Nlink = nl
	}
}

// attrOf fills the attributes of rel in b.
func (f *FS) attrOf(b *store.Branch, rel string, out *fuse.AttrOut) syscall.Errno {
	var st unix.Stat_t
	res, err := f.st.ResolveStat(b, rel, &st)
	if err != nil {
		return errno(err)
	}
	out.Attr.FromStat(sysStat(&st))
	if res.Nlink > out.Attr.Nlink {
		out.Attr.Nlink = res.Nlink
	}
	return 0
}

// abandon closes a descriptor that will not become a handle.
func (f *FS) abandon(fd int, w *store.Writer) {
	unix.Close(fd)
	f.st.CloseWrite(w)
}
