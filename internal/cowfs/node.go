package cowfs

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/arbor-dev/arbor/internal/store"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// node is one file system object of one view. Its path is where it sits
// under its view root.
type node struct {
	fs.Inode
	fs   *FS
	br   *store.Branch // nil for the mount root: it shows the current branch
	root *fs.Inode     // its view root (the mount root or an /@NAME node)
	at   bool          // the view is an /@NAME one

	mu        sync.Mutex           // guards the fields below
	lowerOpen int                  // descriptors open on a lower copy of this inode
	handles   map[*handle]struct{} // open descriptors, for calls on an unlinked file
	gone      bool                 // unlinked from this view
	misses    map[string]struct{}  // for a view root, names it answered as absent (see missed)
	realIno   uint64               // for a regular file, the real file its descriptors are open on
	backed    bool                 // a passthrough descriptor was opened on it (see bind)

	born time.Time // when a lookup made it (see young)
}

func (n *node) addHandle(h *handle) {
	n.mu.Lock()
	n.addHandleLocked(h)
	n.mu.Unlock()
}

// bind adds h, open on the real file ino if regular, unless the kernel
// inode must not take that file. A kernel inode's passthrough backing file
// is the one its first open registered, and go-fuse drops it only after the
// last Release has returned (it counts opens itself): an open on a new real
// file (a copy-up) served meanwhile, even with no handle left on the node,
// would do its I/O on the old file, which may be a frozen layer its parent
// and siblings still show (TestOpenDuringLateRelease). So a node takes a
// new real file only with no descriptor open and, if it ever had a
// passthrough one, no RELEASE in go-fuse's hands (FS.releasing: a release
// whose handle is dropped is counted until go-fuse is done). Otherwise bind
// answers false, Open answers ESTALE, and the kernel looks the path up
// again (LOOKUP_REVAL) into a new inode (viewGen changes with the real
// file) and retries the open once, on it. The check and the add are one
// critical section, so two opens racing on the node cannot both pass.
func (n *node) bind(h *handle, regular bool, ino uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if regular && ino != n.realIno {
		if len(n.handles) > 0 || n.backed && n.fs.releasing.Load() > 0 {
			return false
		}
		n.realIno = ino
	}
	n.addHandleLocked(h)
	return true
}

func (n *node) addHandleLocked(h *handle) {
	if h.passthrough {
		for o := range n.handles {
			if o.direct {
				// The kernel inode may be in cached mode (a shared mapping
				// of o): a passthrough open of it would fail with EIO.
				h.passthrough, h.direct, h.metered = false, true, h.meter
				break
			}
		}
	}
	if n.handles == nil {
		n.handles = map[*handle]struct{}{}
	}
	n.handles[h] = struct{}{}
	if h.lower {
		n.lowerOpen++
	}
	if h.passthrough {
		n.backed = true
	}
}

func (n *node) dropHandle(h *handle) {
	n.mu.Lock()
	delete(n.handles, h)
	if h.lower {
		n.lowerOpen--
	}
	n.mu.Unlock()
}

// anyHandle returns an open descriptor of the node, a writable one first:
// chmod or stat of an unlinked file goes through it.
func (n *node) anyHandle() *handle {
	n.mu.Lock()
	defer n.mu.Unlock()
	var found *handle
	for h := range n.handles {
		if !h.lower {
			return h
		}
		found = h
	}
	return found
}

func (n *node) isGone() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.gone
}

var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeReadlinker     = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeReaddirer      = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeGetxattrer     = (*node)(nil)
	_ fs.NodeSetxattrer     = (*node)(nil)
	_ fs.NodeListxattrer    = (*node)(nil)
	_ fs.NodeRemovexattrer  = (*node)(nil)
	_ fs.NodeStatfser       = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeIoctler        = (*node)(nil)
)

// branch is the branch the node shows.
func (n *node) branch() (*store.Branch, error) {
	if n.br != nil {
		return n.br, nil
	}
	return n.fs.currentBranch()
}

// rel is the node's path in its branch.
func (n *node) rel() string {
	if &n.Inode == n.root {
		return ""
	}
	return n.Path(n.root)
}

// childRel is the path of name under n in its branch.
func (n *node) childRel(name string) string { return join(n.rel(), name) }

func (n *node) resolve() (*store.Branch, string, store.Res, syscall.Errno) {
	return n.resolveStat(nil)
}

// where is the node's branch and path in it, unresolved.
func (n *node) where() (*store.Branch, string, syscall.Errno) {
	b, err := n.branch()
	if err != nil {
		return nil, "", errno(err)
	}
	rel := n.rel()
	if strings.HasPrefix(rel, ".go-fuse") || strings.Contains(rel, "/.go-fuse.") {
		return nil, "", syscall.ENOENT // orphaned: unlinked while open, or by a switch
	}
	return b, rel, 0
}

// resolveStat is resolve that also lstats the result into st, if not nil.
func (n *node) resolveStat(st *unix.Stat_t) (*store.Branch, string, store.Res, syscall.Errno) {
	b, rel, e := n.where()
	if e != 0 {
		return nil, "", store.Res{}, e
	}
	var err error
	var res store.Res
	if st != nil {
		res, err = n.fs.st.ResolveStat(b, rel, st)
	} else {
		res, err = n.fs.st.Resolve(b, rel)
	}
	if err != nil {
		return nil, "", store.Res{}, errno(err)
	}
	return b, rel, res, 0
}

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return fs.ToErrno(err)
}

func itoa(fd int) string { return strconv.Itoa(fd) }

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// fill converts a stat, keeping the node's stable inode number.
func (n *node) fill(a *fuse.Attr, st *unix.Stat_t) {
	a.FromStat(sysStat(st))
	if ino := n.StableAttr().Ino; ino != 0 && &n.Inode != n.fs.rootInode() {
		a.Ino = ino
	}
}

// child makes the inode for a resolved name under n.
func (n *node) child(ctx context.Context, name string, res store.Res, st *unix.Stat_t, out *fuse.EntryOut) *fs.Inode {
	ino := res.Ino
	if ino == 0 {
		ino = st.Ino
	}
	b, _ := n.branch()
	gen := viewGen(b, n.at, st, res)
	c := &node{fs: n.fs, br: b, root: n.root, at: n.at, realIno: st.Ino, born: time.Now()}
	in := n.NewInode(ctx, c, fs.StableAttr{Mode: st.Mode & unix.S_IFMT, Ino: ino, Gen: gen})
	out.Attr.FromStat(sysStat(st))
	out.Attr.Ino = ino
	if res.Nlink > out.Attr.Nlink {
		out.Attr.Nlink = res.Nlink
	}
	if res.IsDir() {
		n.fs.mergedLinks(b, n.childRel(name), res, &out.Attr)
	}
	if out.Attr.Nlink > 1 && !res.IsDir() {
		// Another name of this inode may be copied up at any time, making
		// it another kernel inode: nothing about it may be cached.
		out.SetEntryTimeout(time.Nanosecond)
		out.SetAttrTimeout(time.Nanosecond)
	} else if n.fs.writing(st, res.Real) {
		out.SetAttrTimeout(time.Nanosecond)
	}
	return in
}

// writing reports whether the regular file real (stat st) is open for
// writing: its size and times change without a request, so they are not cached.
func (f *FS) writing(st *unix.Stat_t, real string) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFREG && f.st.Writing(real)
}

// viewGen is the go-fuse generation of a node: its view (the branch, and
// whether through /@NAME), and for a regular file the real file that backs
// it. When what a path resolves to changes (a copy-up; main's old content
// moved into a snapshot), a new lookup gives a new kernel inode with the
// same st_ino: the kernel keeps one passthrough backing file per inode, and
// the old inode may still have descriptors open on the old file.
func viewGen(b *store.Branch, at bool, st *unix.Stat_t, res store.Res) uint64 {
	gen := b.ID * 2
	if at {
		gen++
	}
	gen <<= 40
	if st.Mode&unix.S_IFMT == unix.S_IFREG {
		gen |= st.Ino & (1<<40 - 1)
	}
	return gen
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	branch := ""
	if b, err := n.branch(); err == nil {
		branch = b.Name
	}
	gen := n.fs.lookupGen(branch)
	in, e := n.lookupAny(ctx, name, out)
	if n.fs.lookupGen(branch) != gen {
		// A change was published meanwhile; its invalidation may reach the
		// kernel before this answer does.
		out.SetEntryTimeout(time.Nanosecond)
		out.SetAttrTimeout(time.Nanosecond)
	}
	return in, e
}

func (n *node) lookupAny(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if len(name) > n.fs.nameMax {
		return nil, syscall.ENAMETOOLONG // the kernel then makes nothing of that name either
	}
	if &n.Inode == n.root {
		if name == ctlName {
			return n.fs.ctlInode(ctx, n, out)
		}
		if strings.HasPrefix(name, "@") {
			return n.fs.viewInode(ctx, n, name[1:], out)
		}
	}
	atRoot := n.br == nil && &n.Inode == n.root
	if !atRoot {
		in, e := n.lookup(ctx, name, out)
		if e == syscall.ENOENT && &n.Inode == n.root {
			n.missed(name, out) // an /@NAME view root
		}
		return in, e
	}
	// The root shows the current branch; a switch or commit may land while
	// this lookup runs, after invalidateRoot looked at what the kernel
	// knows. Then the answer is of the old branch: look again.
	for try := 0; ; try++ {
		gen := n.fs.rootGeneration()
		in, e := n.lookup(ctx, name, out)
		if e == syscall.ENOENT {
			n.fs.rootMissed(name, gen, out)
			return in, e
		}
		if e != 0 || n.fs.rootGeneration() == gen {
			return in, e
		}
		if try == 3 {
			out.SetEntryTimeout(time.Nanosecond) // still moving: let the kernel ask again
			return in, e
		}
	}
}

func (n *node) lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	b, err := n.branch()
	if err != nil {
		return nil, errno(err)
	}
	rel := join(n.rel(), name)
	var st unix.Stat_t
	res, err := n.fs.st.ResolveStat(b, rel, &st)
	if err != nil {
		return nil, errno(err)
	}
	return n.child(ctx, name, res, &st, out), 0
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	if h, ok := f.(*handle); ok && !h.lower {
		e := h.Getattr(ctx, out)
		if h.write || n.fs.st.Writing(h.real) {
			out.SetTimeout(time.Nanosecond)
		}
		return e
	}
	// A descriptor on a lower copy is not asked: the path may have been
	// copied up since, and the kernel would take the old size for the new.
	var st unix.Stat_t
	b, rel, res, e := n.resolveStat(&st)
	if e != 0 {
		if h := n.anyHandle(); h != nil && e == syscall.ENOENT {
			return h.Getattr(ctx, out)
		}
		if e == syscall.ESTALE && &n.Inode == n.root {
			// A stale branch's view root, or the mount's root showing a
			// stale branch, stays reachable, so that its control file can
			// abort it (or switch away) and the @name views still answer:
			// it shows as the base directory. Its files answer ESTALE.
			if err := n.fs.st.Lstat(n.fs.st.Base(), &st); err != nil {
				return errno(err)
			}
			out.Attr.FromStat(sysStat(&st))
			out.Attr.Ino = n.StableAttr().Ino
			out.SetTimeout(time.Nanosecond)
			return 0
		}
		return e
	}
	n.fill(&out.Attr, &st)
	if res.Ino != 0 {
		out.Attr.Ino = res.Ino
	}
	if res.Nlink > out.Attr.Nlink {
		out.Attr.Nlink = res.Nlink
	}
	if (out.Attr.Nlink > 1 && !res.IsDir()) || n.fs.writing(&st, res.Real) {
		out.SetTimeout(time.Nanosecond)
	}
	if res.IsDir() {
		n.fs.mergedLinks(b, rel, res, &out.Attr)
	}
	return 0
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if h, ok := f.(*handle); ok && !h.lower {
		return h.Setattr(ctx, in, out)
	}
	b, rel, res, e := n.resolve()
	if e != 0 {
		if h := n.anyHandle(); h != nil && !h.lower && e == syscall.ENOENT {
			return h.Setattr(ctx, in, out)
		}
		return e
	}
	if sz, ok := in.GetSize(); ok {
		var st unix.Stat_t
		if err := n.fs.st.Lstat(res.DataReal(), &st); err == nil && int64(sz) > st.Size {
			if err := n.fs.st.Grow(b, int64(sz)-st.Size); err != nil {
				return errno(err)
			}
		}
	}
	// A change of metadata alone copies no data (metacopy); a size does.
	copyUp := n.fs.st.CopyUpMeta
	if _, ok := in.GetSize(); ok {
		copyUp = n.fs.st.CopyUp
	}
	real, err := copyUp(b, rel)
	if err != nil {
		return errno(err)
	}
	if sz, ok := in.GetSize(); ok {
		err := n.fs.st.Truncate(real, int64(sz))
		n.fs.st.Measure(real) // a truncation allocates nothing; a shrink frees
		if err != nil {
			return errno(err)
		}
	}
	if e := n.fs.setattrPath(real, in); e != 0 {
		return e
	}
	if killOnSetattr(ctx, in) {
		var st unix.Stat_t
		if n.fs.st.Lstat(real, &st) == nil {
			if m, kill := privKilled(ctx, &st); kill {
				n.fs.st.Chmod(real, m)
			}
		}
	}
	n.changed(b, rel, false)
	return n.Getattr(ctx, nil, out)
}

// setattrPath applies mode, owner and times (not size) to a real path,
// walked by the store with no symlink followed (a symlink's own owner and
// times; its mode is EOPNOTSUPP).
func (f *FS) setattrPath(real string, in *fuse.SetAttrIn) syscall.Errno {
	return setattr(in, func(m uint32) error { return f.st.Chmod(real, m) },
		func(u, g int) error { return f.st.Chown(real, u, g) },
		func(ts []unix.Timespec) error { return f.st.Utimes(real, ts) })
}

// setattrFd applies mode, owner and times (not size) through an open
// descriptor of a regular file.
func setattrFd(fd int, in *fuse.SetAttrIn) syscall.Errno {
	return setattr(in, func(m uint32) error { return unix.Fchmod(fd, m) },
		func(u, g int) error { return unix.Fchown(fd, u, g) },
		func(ts []unix.Timespec) error {
			return unix.UtimesNanoAt(unix.AT_FDCWD, "/proc/self/fd/"+itoa(fd), ts, 0)
		})
}

// setattr applies what in sets of mode, owner and times with the calls given.
func setattr(in *fuse.SetAttrIn, chmod func(uint32) error, chown func(u, g int) error, utimes func([]unix.Timespec) error) syscall.Errno {
	if m, ok := in.GetMode(); ok {
		if err := chmod(m & 07777); err != nil {
			return errno(err)
		}
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		u, g := -1, -1
		if uok {
			u = int(uid)
		}
		if gok {
			g = int(gid)
		}
		if err := chown(u, g); err != nil {
			return errno(err)
		}
	}
	atime, aok := in.GetATime()
	mtime, mok := in.GetMTime()
	if aok || mok || in.Valid&(fuse.FATTR_ATIME_NOW|fuse.FATTR_MTIME_NOW) != 0 {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if aok {
			ts[0] = unix.NsecToTimespec(atime.UnixNano())
		}
		if mok {
			ts[1] = unix.NsecToTimespec(mtime.UnixNano())
		}
		if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
			ts[0] = unix.Timespec{Nsec: unix.UTIME_NOW}
		}
		if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
			ts[1] = unix.Timespec{Nsec: unix.UTIME_NOW}
		}
		if err := utimes(ts); err != nil {
			return errno(err)
		}
	}
	return 0
}

// ownFd gives a file just created through fd (at real) the caller's uid
// and gid, or its parent's gid if the parent is setgid (see owner).
func (f *FS) ownFd(ctx context.Context, fd int, real string) {
	c, _ := fuse.FromContext(ctx)
	gid := int(c.Gid)
	var pst unix.Stat_t
	if f.st.Lstat(real[:strings.LastIndexByte(real, '/')], &pst) == nil && pst.Mode&unix.S_IFMT == unix.S_IFDIR && pst.Mode&unix.S_ISGID != 0 {
		gid = int(pst.Gid)
	}
	unix.Fchown(fd, int(c.Uid), gid)
}

const writeFlags = syscall.O_WRONLY | syscall.O_RDWR | syscall.O_TRUNC

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	b, rel, e := n.where()
	if e != 0 {
		return nil, 0, e
	}
	flags &^= syscall.O_CREAT | syscall.O_EXCL
	write := flags&writeFlags != 0
	var st unix.Stat_t
	var fd int
	var res store.Res
	var err error
	if write {
		fd, res, err = n.fs.st.OpenFile(b, rel, int(flags), 0, false)
		if err == nil {
			if err = unix.Fstat(fd, &st); err != nil {
				n.fs.abandon(fd, res.Writer)
			}
		}
	} else {
		fd, res, err = n.fs.st.OpenRead(b, rel, int(flags), &st)
	}
	if err != nil {
		return nil, 0, errno(err)
	}
	h := n.fs.newHandle(fd, n, b, res, write)
	h.lower = res.Lower && !write
	if write && h.passthrough && privServed(&st) {
		h.passthrough, h.direct, h.metered = false, true, h.meter // its writes must reach us (killpriv.go)
	}
	if !n.bind(h, st.Mode&unix.S_IFMT == unix.S_IFREG, st.Ino) {
		n.fs.abandon(fd, res.Writer)
		return nil, 0, syscall.ESTALE
	}
	if flags&syscall.O_TRUNC != 0 && n.fs.killAsked(ctx) {
		killPriv(ctx, fd) // an O_TRUNC by a caller without CAP_FSETID (killpriv.go)
	}
	if write {
		n.changed(b, rel, false) // other views: a copy-up, O_TRUNC, and writes to come
	}
	return h, n.fs.openFlags(h), 0
}

// owner gives a new object, name in the directory descriptor dir, the
// caller's uid and gid (the daemon runs as root; the kernel checked the
// caller's permissions already).
func owner(ctx context.Context, dir int, name string) {
	c, ok := fuse.FromContext(ctx)
	if !ok || os.Geteuid() != 0 {
		return
	}
	if c.Uid == 0 && int(c.Gid) == os.Getegid() {
		// The caller is who made it: the kernel gave it the same owner,
		// and the parent's group if the parent is setgid, already.
		return
	}
	gid := int(c.Gid)
	var pst unix.Stat_t
	if unix.Fstat(dir, &pst) == nil && pst.Mode&unix.S_ISGID != 0 {
		gid = int(pst.Gid)
	}
	unix.Fchownat(dir, name, int(c.Uid), gid, unix.AT_SYMLINK_NOFOLLOW)
}

// exactMode gives an object just made the permission bits the kernel asked
// for (mode: the caller's umask already applied, as the kernel does without
// FUSE_DONT_MASK), which the daemon's own umask cut, and which a chown by
// owner cleared (setuid, setgid). A directory keeps the setgid bit the
// filesystem gave it from a setgid parent. st is the object's stat, and is
// updated.
func exactMode(mode uint32, st *unix.Stat_t, chmod func(uint32) error) error {
	want := mode & 07777
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		want |= st.Mode & unix.S_ISGID
	}
	if st.Mode&07777 == want || st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil
	}
	if err := chmod(want); err != nil {
		return err
	}
	st.Mode = st.Mode&^07777 | want
	return nil
}

// make creates name under n with mk (name in the directory descriptor the
// store opened for it) and looks it up; mode is the permission bits asked
// for (none for a symlink).
func (n *node) make(ctx context.Context, name string, dir bool, mode uint32, mk func(dir int, name string) error, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if &n.Inode == n.root && (name == ctlName || strings.HasPrefix(name, "@")) {
		return nil, syscall.EPERM
	}
	b, err := n.branch()
	if err != nil {
		return nil, errno(err)
	}
	prel := n.rel()
	rel := join(prel, name)
	var st unix.Stat_t
	err = n.fs.st.Create(b, rel, dir, func(dir int, name string) error {
		if err := mk(dir, name); err != nil {
			return err
		}
		owner(ctx, dir, name)
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		return exactMode(mode, &st, func(m uint32) error { return unix.Fchmodat(dir, name, m, 0) })
	})
	if err != nil {
		return nil, errno(err)
	}
	res, err := n.fs.st.Resolve(b, rel)
	if err != nil {
		return nil, errno(err)
	}
	n.changed(b, rel, true)
	return n.child(ctx, name, res, &st, out), 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if &n.Inode == n.root && (name == ctlName || strings.HasPrefix(name, "@")) {
		return nil, nil, 0, syscall.EPERM
	}
	b, err := n.branch()
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	rel := n.childRel(name)
	fd, made, err := n.fs.st.OpenFile(b, rel, int(flags), mode, true)
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	real := made.Real
	write := int(flags)&(unix.O_WRONLY|unix.O_RDWR|unix.O_TRUNC) != 0
	n.changed(b, rel, true)
	if c, ok := fuse.FromContext(ctx); ok && os.Geteuid() == 0 && (c.Uid != 0 || int(c.Gid) != os.Getegid()) {
		n.fs.ownFd(ctx, fd, real)
	}
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	if err == nil {
		err = exactMode(mode, &st, func(m uint32) error { return unix.Fchmod(fd, m) })
	}
	if err != nil {
		n.fs.abandon(fd, made.Writer)
		return nil, nil, 0, errno(err)
	}
	res, err := n.fs.st.Resolve(b, rel)
	if err != nil {
		n.fs.abandon(fd, made.Writer)
		return nil, nil, 0, errno(err)
	}
	in := n.child(ctx, name, res, &st, out)
	c := in.Operations().(*node)
	h := n.fs.newHandle(fd, c, b, made, write)
	if write && h.passthrough && privServed(&st) {
		h.passthrough, h.direct, h.metered = false, true, h.meter // its writes must reach us (killpriv.go)
	}
	c.addHandle(h)
	return in, h, n.fs.openFlags(h), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.make(ctx, name, true, mode, func(dir int, name string) error { return unix.Mkdirat(dir, name, mode) }, out)
}

func (n *node) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if mode&unix.S_IFMT == unix.S_IFCHR && dev == 0 {
		return nil, syscall.EPERM // a whiteout's form in a layer (see store)
	}
	return n.make(ctx, name, false, mode, func(dir int, name string) error { return unix.Mknodat(dir, name, mode, int(dev)) }, out)
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.make(ctx, name, false, 0, func(dir int, name string) error { return unix.Symlinkat(target, dir, name) }, out)
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*node)
	if !ok {
		return nil, syscall.EXDEV
	}
	b, err := n.branch()
	if err != nil {
		return nil, errno(err)
	}
	tb, _, _, e := t.resolve()
	if e != 0 {
		return nil, e
	}
	if tb != b {
		return nil, syscall.EXDEV
	}
	rel := join(n.rel(), name)
	if err := n.fs.st.Link(b, t.rel(), rel); err != nil {
		return nil, errno(err)
	}
	n.changed(b, rel, true)
	n.changed(b, t.rel(), false) // its link count
	// Both names are one kernel inode, the target's.
	var a fuse.AttrOut
	if e := n.fs.attrOf(b, rel, &a); e != 0 {
		return nil, e
	}
	out.Attr = a.Attr
	out.Attr.Ino = t.StableAttr().Ino
	return &t.Inode, 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	_, _, res, e := n.resolve()
	if e != 0 {
		return nil, e
	}
	buf := make([]byte, 4096)
	for {
		sz, err := n.fs.st.Readlink(res.Real, buf)
		if err != nil {
			return nil, errno(err)
		}
		if sz < len(buf) {
			return buf[:sz], 0
		}
		buf = make([]byte, len(buf)*2)
	}
}

func (n *node) remove(name string, dir bool) syscall.Errno {
	if &n.Inode == n.root && (name == ctlName || strings.HasPrefix(name, "@")) {
		return syscall.EPERM
	}
	b, err := n.branch()
	if err != nil {
		return errno(err)
	}
	rel := join(n.rel(), name)
	if err := n.fs.st.Remove(b, rel, dir); err != nil {
		return errno(err)
	}
	n.changed(b, rel, true)
	if ch := n.GetChild(name); ch != nil {
		if c, ok := ch.Operations().(*node); ok {
			c.mu.Lock()
			c.gone = true
			c.mu.Unlock()
		}
	}
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno { return n.remove(name, false) }
func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno  { return n.remove(name, true) }

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	b, err := n.branch()
	if err != nil {
		return errno(err)
	}
	nb, err := np.branch()
	if err != nil {
		return errno(err)
	}
	if nb != b || np.root != n.root {
		return syscall.EXDEV
	}
	for _, x := range []struct {
		p    *node
		name string
	}{{n, name}, {np, newName}} {
		if &x.p.Inode == x.p.root && (x.name == ctlName || strings.HasPrefix(x.name, "@")) {
			return syscall.EPERM
		}
	}
	oldRel, newRel := join(n.rel(), name), join(np.rel(), newName)
	if err := n.fs.st.Rename(b, oldRel, newRel, flags); err != nil {
		return errno(err)
	}
	n.changed(b, oldRel, true)
	n.changed(b, newRel, true)
	return 0
}

// OpendirHandle lets the kernel keep the listing (FOPEN_CACHE_DIR): a
// change made through another view reaches it as an invalidation
// (notify.go), one made through this view the kernel sees itself. The
// directory is listed at its first read, not at the open: a cached listing
// reads nothing.
func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return &dirHandle{n: n}, fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE, 0
}

// dirHandle is an open directory, listed at its first read or seek.
type dirHandle struct {
	n  *node
	ds fs.DirStream
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
	_ fs.FileReleasedirer = (*dirHandle)(nil)
)

func (d *dirHandle) list(ctx context.Context) syscall.Errno {
	if d.ds != nil {
		return 0
	}
	ds, e := d.n.Readdir(ctx)
	if e != 0 {
		return e
	}
	d.ds = ds
	return 0
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if e := d.list(ctx); e != 0 {
		return nil, e
	}
	if !d.ds.HasNext() {
		return nil, 0
	}
	de, e := d.ds.Next()
	return &de, e
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if e := d.list(ctx); e != 0 {
		return e
	}
	if sd, ok := d.ds.(fs.FileSeekdirer); ok {
		return sd.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	if d.ds != nil {
		d.ds.Close()
	}
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	b, rel, _, e := n.resolve()
	if e != 0 {
		return nil, e
	}
	ents, err := n.fs.st.ReadDir(b, rel)
	if err != nil {
		return nil, errno(err)
	}
	out := make([]fuse.DirEntry, 0, len(ents)+3)
	pino := n.StableAttr().Ino
	if _, p := n.Parent(); p != nil {
		pino = p.StableAttr().Ino
	}
	out = append(out, fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: n.StableAttr().Ino},
		fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: pino})
	for _, d := range ents {
		out = append(out, fuse.DirEntry{Name: d.Name, Mode: d.Mode, Ino: d.Ino})
	}
	// The control file is reachable by name only: listed, git status and
	// git add -A in a mount would take it for a file of the project.
	return newCookieStream(out), 0
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if strings.HasPrefix(attr, "user.arbor.") {
		return 0, syscall.ENODATA // the store's own
	}
	_, _, res, e := n.resolve()
	if e != 0 {
		return 0, e
	}
	sz, err := n.fs.st.Getxattr(res.Real, attr, dest)
	return uint32(sz), errno(err)
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if strings.HasPrefix(attr, "user.arbor.") {
		return syscall.EPERM
	}
	b, rel, _, e := n.resolve()
	if e != 0 {
		return e
	}
	real, err := n.fs.st.CopyUpMeta(b, rel)
	if err != nil {
		return errno(err)
	}
	// An xattr takes disk (on ext4 a block of its own once the inode is
	// full): room for it is reserved under the store's limit, and what the
	// file allocates after is recorded.
	reserved, err := n.fs.st.Reserve(b, 0, max(int64(len(attr)+len(data)), 4096))
	if err != nil {
		return errno(err)
	}
	err = n.fs.st.Setxattr(real, attr, data, int(flags))
	alloc := int64(-1)
	var st unix.Stat_t
	if n.fs.st.Lstat(real, &st) == nil {
		alloc = st.Blocks * 512
	}
	n.fs.st.Settle(real, reserved, alloc)
	if err != nil {
		return errno(err)
	}
	n.changed(b, rel, false)
	return 0
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if strings.HasPrefix(attr, "user.arbor.") {
		return syscall.ENODATA
	}
	b, rel, res, e := n.resolve()
	if e != 0 {
		return e
	}
	if _, err := n.fs.st.Getxattr(res.Real, attr, nil); err != nil {
		return errno(err)
	}
	real, err := n.fs.st.CopyUpMeta(b, rel)
	if err != nil {
		return errno(err)
	}
	if err := n.fs.st.Removexattr(real, attr); err != nil {
		return errno(err)
	}
	n.fs.st.Measure(real) // it may free a block
	n.changed(b, rel, false)
	return 0
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	_, _, res, e := n.resolve()
	if e != 0 {
		return 0, e
	}
	sz, err := n.fs.st.Listxattr(res.Real, nil)
	if err != nil {
		return 0, errno(err)
	}
	buf := make([]byte, sz)
	if sz, err = n.fs.st.Listxattr(res.Real, buf); err != nil {
		return 0, errno(err)
	}
	var out []byte
	for _, a := range strings.Split(string(buf[:sz]), "\x00") {
		if a != "" && !strings.HasPrefix(a, "user.arbor.") {
			out = append(append(out, a...), 0)
		}
	}
	if len(dest) == 0 {
		return uint32(len(out)), 0
	}
	if len(dest) < len(out) {
		return uint32(len(out)), syscall.ERANGE
	}
	return uint32(copy(dest, out)), 0
}

func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var st unix.Statfs_t
	if err := n.fs.st.Statfs(&st); err != nil {
		return errno(err)
	}
	out.FromStatfsT((*syscall.Statfs_t)(unsafe.Pointer(&st)))
	return 0
}

func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if h, ok := f.(*handle); ok {
		return h.Fsync(ctx, flags)
	}
	_, _, res, e := n.resolve()
	if e != 0 {
		return e
	}
	return errno(n.fs.st.Fsync(res.Real))
}

func (n *node) Ioctl(ctx context.Context, f fs.FileHandle, cmd uint32, arg uint64, input, output []byte) (int32, syscall.Errno) {
	return -1, syscall.ENOTTY
}

// sysStat views a unix.Stat_t as the identical syscall.Stat_t go-fuse takes.
func sysStat(st *unix.Stat_t) *syscall.Stat_t { return (*syscall.Stat_t)(unsafe.Pointer(st)) }
