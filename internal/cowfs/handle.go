package cowfs

import (
	"context"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/arbor-dev/arbor/internal/store"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// handle is one open file: our descriptor on the real file.
type handle struct {
	mu          sync.Mutex // guards fd against Release
	fd          int
	n           *node
	br          *store.Branch
	real        string        // the real file at the open
	w           *store.Writer // its count in the store's writers, if it has one
	write       bool
	lower       bool // counted in n.lowerOpen
	passthrough bool
	// metered: the daemon serves this descriptor's writes and counts them
	// against the branch's quota and the store's limit before making them
	// (store.Reserve). direct: served with FOPEN_DIRECT_IO, so that it can
	// share its kernel inode with passthrough descriptors (see FS.newHandle).
	metered bool
	direct  bool
	meter   bool // metered if it is not passthrough
}

var (
	_ fs.FileReader          = (*handle)(nil)
	_ fs.FileWriter          = (*handle)(nil)
	_ fs.FileReleaser        = (*handle)(nil)
	_ fs.FileGetattrer       = (*handle)(nil)
	_ fs.FileSetattrer       = (*handle)(nil)
	_ fs.FileFlusher         = (*handle)(nil)
	_ fs.FileFsyncer         = (*handle)(nil)
	_ fs.FileAllocater       = (*handle)(nil)
	_ fs.FileLseeker         = (*handle)(nil)
	_ fs.FilePassthroughFder = (*handle)(nil)
	_ fs.FileIoctler         = (*handle)(nil)
)

func (h *handle) PassthroughFd() (int, bool) { return h.fd, h.passthrough }

func (h *handle) Read(ctx context.Context, buf []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.n.fs.served.reads.Add(1)
	n, err := unix.Pread(h.fd, buf, off)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return fuse.ReadResultData(buf[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	h.n.fs.served.writes.Add(1)
	if h.metered {
		return h.meteredWrite(ctx, data, off)
	}
	n, err := unix.Pwrite(h.fd, data, off)
	if err == nil && h.n.fs.killAsked(ctx) {
		killPriv(ctx, h.fd) // the kernel left it to us (killpriv.go)
	}
	return uint32(n), fs.ToErrno(err)
}

// meteredWrite makes a write only if the branch's quota and the store's
// limit have room for what it may allocate (ENOSPC otherwise, the file
// untouched), then records what the file allocates after it.
func (h *handle) meteredWrite(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	var st unix.Stat_t
	if err := unix.Fstat(h.fd, &st); err != nil {
		return 0, fs.ToErrno(err)
	}
	n := int64(len(data))
	res, err := h.n.fs.st.Reserve(h.br, off+n-st.Size, store.AllocGrowth(&st, off, n))
	if err != nil {
		return 0, fs.ToErrno(err)
	}
	w, err := unix.Pwrite(h.fd, data, off)
	if err == nil && h.n.fs.killAsked(ctx) {
		killPriv(ctx, h.fd)
	}
	h.settle(res)
	return uint32(max(w, 0)), fs.ToErrno(err)
}

// settle ends a reservation of a metered change, recording what the file
// allocates now.
func (h *handle) settle(reserved int64) {
	var st unix.Stat_t
	if unix.Fstat(h.fd, &st) != nil {
		h.n.fs.st.Settle(h.path(), reserved, -1)
		h.n.fs.st.Measure(h.path())
		return
	}
	h.n.fs.st.Settle(h.path(), reserved, st.Blocks*512)
}

// path is where the real file is now: a writer's file moves with it (a
// rename, a commit into main, a fork that keeps it apart).
func (h *handle) path() string {
	if h.w != nil {
		return h.n.fs.st.WriterPath(h.w)
	}
	return h.real
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fd < 0 {
		return syscall.EBADF
	}
	err := unix.Close(h.fd)
	h.fd = -1
	h.n.fs.st.CloseWrite(h.w)
	h.n.dropHandle(h)
	if hook := afterDrop.Load(); hook != nil {
		(*hook)(h)
	}
	if h.write && !h.n.isGone() {
		// Every view, this one too: writes through a shared mapping
		// changed the times without a request.
		h.n.fs.st.Publish(store.Event{Branch: h.br.Name, Path: h.n.rel(), Origin: nil})
	}
	return fs.ToErrno(err)
}

// afterDrop, set by tests only, runs in Release once the node no longer
// counts the handle: go-fuse drops its passthrough backing file only after
// Release returns.
var afterDrop atomic.Pointer[func(h *handle)]

func (h *handle) Flush(ctx context.Context) syscall.Errno {
	// Like close(2) on a dup, so that locks and NFS-style semantics hold.
	fd, err := unix.Dup(h.fd)
	if err != nil {
		return fs.ToErrno(err)
	}
	return fs.ToErrno(unix.Close(fd))
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return fs.ToErrno(unix.Fsync(h.fd))
}

func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	var st unix.Stat_t
	if err := unix.Fstat(h.fd, &st); err != nil {
		return fs.ToErrno(err)
	}
	h.n.fill(&out.Attr, &st)
	if h.lower && h.n.isGone() {
		out.Attr.Nlink = 0 // its name is gone from this branch; the lower file is untouched
	}
	return 0
}

func (h *handle) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if sz, ok := in.GetSize(); ok {
		if h.n.fs.st.QuotaOf(h.br) > 0 {
			var st unix.Stat_t
			if err := unix.Fstat(h.fd, &st); err == nil && int64(sz) > st.Size {
				if err := h.n.fs.st.Grow(h.br, int64(sz)-st.Size); err != nil {
					return fs.ToErrno(err)
				}
			}
		}
		err := unix.Ftruncate(h.fd, int64(sz))
		h.settle(0) // a truncation allocates nothing; a shrink frees
		if err != nil {
			return fs.ToErrno(err)
		}
	}
	if killOnSetattr(ctx, in) {
		killPriv(ctx, h.fd)
	}
	if errno := setattrFd(h.fd, in); errno != 0 {
		return errno
	}
	if !h.n.isGone() {
		h.n.changed(h.br, h.n.rel(), false)
	}
	return h.Getattr(ctx, out)
}

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	var reserved int64
	if mode&(unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_COLLAPSE_RANGE) == 0 {
		// It allocates (KEEP_SIZE too); only a lengthening counts for a quota.
		var st unix.Stat_t
		if err := unix.Fstat(h.fd, &st); err != nil {
			return fs.ToErrno(err)
		}
		grow := int64(off+size) - st.Size
		if mode&unix.FALLOC_FL_KEEP_SIZE != 0 {
			grow = 0
		}
		var err error
		if reserved, err = h.n.fs.st.Reserve(h.br, grow, store.AllocGrowth(&st, int64(off), int64(size))); err != nil {
			return fs.ToErrno(err)
		}
	}
	err := unix.Fallocate(h.fd, mode, int64(off), int64(size))
	h.settle(reserved)
	return fs.ToErrno(err)
}

func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	n, err := unix.Seek(h.fd, int64(off), int(whence))
	return uint64(n), fs.ToErrno(err)
}

func (h *handle) Ioctl(ctx context.Context, cmd uint32, arg uint64, input, output []byte) (int32, syscall.Errno) {
	return -1, syscall.ENOTTY
}
