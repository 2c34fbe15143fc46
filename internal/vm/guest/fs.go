package guest

import (
	"context"
	"path"
	"sync"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/internal/vm/wire"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The node's files are a FUSE filesystem at /workspace whose calls go to
// the host over the agent's port (wire.OpFS), by path: a fork's child asks
// its own host, which serves its own files, and needs nothing of the
// source's. Nothing is cached (attribute and entry timeouts 0), so what
// the host changes is seen at once.

// WorkspaceDir is where the node's files are in the guest.
const WorkspaceDir = "/workspace"

// remote sends file calls to the host and waits for their replies. A call
// in flight when a new session starts (a fork's child, a restore: the host
// that was asked is not this one) is sent again on the hello.
type remote struct {
	a       *agent
	mu      sync.Mutex
	next    uint64
	pending map[uint64]*fsCall
}

type fsCall struct {
	m  *wire.Msg
	ch chan *wire.Msg
}

func (r *remote) call(ctx context.Context, m *wire.Msg) (*wire.Msg, syscall.Errno) {
	r.mu.Lock()
	r.next++
	m.ID = r.next
	m.Op = wire.OpFS
	c := &fsCall{m: m, ch: make(chan *wire.Msg, 1)}
	r.pending[m.ID] = c
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.pending, m.ID)
		r.mu.Unlock()
	}()
	r.a.send("", m)
	select {
	case rep := <-c.ch:
		return rep, syscall.Errno(rep.Errno)
	case <-ctx.Done():
		return nil, syscall.EINTR
	}
}

// reply hands a host's reply to its call.
func (r *remote) reply(m *wire.Msg) {
	r.mu.Lock()
	c := r.pending[m.ID]
	r.mu.Unlock()
	if c != nil {
		select {
		case c.ch <- m:
		default:
		}
	}
}

// resend sends every pending call again (a new session).
func (r *remote) resend() {
	r.mu.Lock()
	var ms []*wire.Msg
	for _, c := range r.pending {
		ms = append(ms, c.m)
	}
	r.mu.Unlock()
	for _, m := range ms {
		r.a.send("", m)
	}
}

type node struct {
	fs.Inode
	r *remote
}

var (
	_ fs.NodeGetattrer  = (*node)(nil)
	_ fs.NodeLookuper   = (*node)(nil)
	_ fs.NodeReaddirer  = (*node)(nil)
	_ fs.NodeOpener     = (*node)(nil)
	_ fs.NodeReader     = (*node)(nil)
	_ fs.NodeWriter     = (*node)(nil)
	_ fs.NodeCreater    = (*node)(nil)
	_ fs.NodeMkdirer    = (*node)(nil)
	_ fs.NodeUnlinker   = (*node)(nil)
	_ fs.NodeRmdirer    = (*node)(nil)
	_ fs.NodeRenamer    = (*node)(nil)
	_ fs.NodeSetattrer  = (*node)(nil)
	_ fs.NodeReadlinker = (*node)(nil)
	_ fs.NodeSymlinker  = (*node)(nil)
	_ fs.NodeFlusher    = (*node)(nil)
	_ fs.NodeFsyncer    = (*node)(nil)
)

func (n *node) rel() string { return n.Path(nil) }

func (n *node) child(name string) string { return path.Join(n.rel(), name) }

func fill(a *fuse.Attr, st *wire.Stat) {
	if st == nil {
		return
	}
	a.Mode, a.Size, a.Ino, a.Nlink, a.Uid, a.Gid = st.Mode, uint64(st.Size), st.Ino, st.Nlink, st.Uid, st.Gid
	a.Blocks = (uint64(st.Size) + 511) / 512
	set := func(ns int64, s *uint64, n *uint32) { *s, *n = uint64(ns/1e9), uint32(ns%1e9) }
	set(st.Atime, &a.Atime, &a.Atimensec)
	set(st.Mtime, &a.Mtime, &a.Mtimensec)
	set(st.Ctime, &a.Ctime, &a.Ctimensec)
}

func (n *node) newChild(ctx context.Context, st *wire.Stat, out *fuse.EntryOut) *fs.Inode {
	fill(&out.Attr, st)
	return n.NewInode(ctx, &node{r: n.r}, fs.StableAttr{Mode: st.Mode & syscall.S_IFMT, Ino: st.Ino})
}

func (n *node) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	rep, e := n.r.call(ctx, &wire.Msg{FS: wire.FSStat, Path: n.rel()})
	if e != 0 {
		return e
	}
	fill(&out.Attr, rep.Stat)
	return 0
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rep, e := n.r.call(ctx, &wire.Msg{FS: wire.FSStat, Path: n.child(name)})
	if e != 0 {
		return nil, e
	}
	return n.newChild(ctx, rep.Stat, out), 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	rep, e := n.r.call(ctx, &wire.Msg{FS: wire.FSReaddir, Path: n.rel()})
	if e != 0 {
		return nil, e
	}
	var ents []fuse.DirEntry
	for _, d := range rep.Ents {
		ents = append(ents, fuse.DirEntry{Name: d.Name, Mode: d.Mode, Ino: d.Ino})
	}
	return fs.NewListDirStream(ents), 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_TRUNC != 0 {
		if _, e := n.r.call(ctx, &wire.Msg{FS: wire.FSSetattr, Path: n.rel(), Flags: wire.SetSize}); e != 0 {
			return nil, 0, e
		}
	}
	return nil, 0, 0
}

func (n *node) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	got := 0
	for got < len(dest) {
		rep, e := n.r.call(ctx, &wire.Msg{FS: wire.FSRead, Path: n.rel(), Off: off + int64(got), Size: int64(min(len(dest)-got, wire.ChunkSize))})
		if e != 0 {
			return nil, e
		}
		got += copy(dest[got:], rep.Data)
		if len(rep.Data) == 0 {
			break
		}
	}
	return fuse.ReadResultData(dest[:got]), 0
}

func (n *node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	done := 0
	for done < len(data) {
		end := min(len(data), done+wire.ChunkSize)
		rep, e := n.r.call(ctx, &wire.Msg{FS: wire.FSWrite, Path: n.rel(), Off: off + int64(done), Data: data[done:end]})
		if e != 0 {
			return uint32(done), e
		}
		if rep.Size == 0 {
			return uint32(done), syscall.EIO
		}
		done += int(rep.Size)
	}
	return uint32(done), 0
}

func (n *node) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	m := &wire.Msg{FS: wire.FSCreate, Path: n.child(name), Mode: mode}
	if flags&syscall.O_EXCL != 0 {
		m.Flags = wire.SetExcl
	}
	rep, e := n.r.call(ctx, m)
	if e != 0 {
		return nil, nil, 0, e
	}
	if flags&syscall.O_TRUNC != 0 && rep.Stat.Size > 0 {
		if rep, e = n.r.call(ctx, &wire.Msg{FS: wire.FSSetattr, Path: n.child(name), Flags: wire.SetSize}); e != 0 {
			return nil, nil, 0, e
		}
	}
	return n.newChild(ctx, rep.Stat, out), nil, 0, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rep, e := n.r.call(ctx, &wire.Msg{FS: wire.FSMkdir, Path: n.child(name), Mode: mode})
	if e != 0 {
		return nil, e
	}
	return n.newChild(ctx, rep.Stat, out), 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	_, e := n.r.call(ctx, &wire.Msg{FS: wire.FSRemove, Path: n.child(name)})
	return e
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno { return n.Unlink(ctx, name) }

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if flags != 0 {
		return syscall.ENOSYS
	}
	to := path.Join(newParent.EmbeddedInode().Path(nil), newName)
	_, e := n.r.call(ctx, &wire.Msg{FS: wire.FSRename, Path: n.child(name), Path2: to})
	return e
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	m := &wire.Msg{FS: wire.FSSetattr, Path: n.rel()}
	if mode, ok := in.GetMode(); ok {
		m.Flags |= wire.SetMode
		m.Mode = mode
	}
	if size, ok := in.GetSize(); ok {
		m.Flags |= wire.SetSize
		m.Size = int64(size)
	}
	at, aok := in.GetATime()
	mt, mok := in.GetMTime()
	if aok || mok {
		now := time.Now()
		if !aok {
			at = now
		}
		if !mok {
			mt = now
		}
		m.Flags |= wire.SetTimes
		m.Atime, m.Mtime = at.UnixNano(), mt.UnixNano()
	}
	rep, e := n.r.call(ctx, m)
	if e != 0 {
		return e
	}
	fill(&out.Attr, rep.Stat)
	return 0
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	rep, e := n.r.call(ctx, &wire.Msg{FS: wire.FSReadlink, Path: n.rel()})
	if e != 0 {
		return nil, e
	}
	return []byte(rep.Path2), 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	rep, e := n.r.call(ctx, &wire.Msg{FS: wire.FSSymlink, Path: n.child(name), Path2: target})
	if e != 0 {
		return nil, e
	}
	return n.newChild(ctx, rep.Stat, out), 0
}

func (n *node) Flush(ctx context.Context, f fs.FileHandle) syscall.Errno { return 0 }

func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno { return 0 }

// mountWorkspace mounts the node's files at WorkspaceDir.
func mountWorkspace(r *remote) error {
	zero := time.Duration(0)
	root := &node{r: r}
	_, err := fs.Mount(WorkspaceDir, root, &fs.Options{
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{DirectMount: true, DirectMountStrict: true, FsName: "arbor", Name: "arbor", MaxWrite: wire.ChunkSize},
	})
	return err
}
