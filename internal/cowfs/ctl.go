package cowfs

import (
	"context"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// ctlNode is a .branchfs_ctl file: writes and ioctls on it act on its view's
// branch (the mount's current branch at the mount root).
type ctlNode struct {
	fs.Inode
	fs   *FS
	view *node
}

var (
	_ fs.NodeOpener    = (*ctlNode)(nil)
	_ fs.NodeGetattrer = (*ctlNode)(nil)
	_ fs.NodeSetattrer = (*ctlNode)(nil)
	_ fs.NodeWriter    = (*ctlNode)(nil)
	_ fs.NodeReader    = (*ctlNode)(nil)
	_ fs.NodeIoctler   = (*ctlNode)(nil)
)

func (f *FS) ctlInode(ctx context.Context, view *node, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if !f.control {
		return nil, syscall.ENOENT
	}
	c := &ctlNode{fs: f, view: view}
	ino := uint64(ctlIno)
	if view.br != nil {
		ino = 1<<62 + view.br.ID*2 + 2
	}
	in := view.NewInode(ctx, c, fs.StableAttr{Mode: syscall.S_IFREG, Ino: ino})
	c.attr(&out.Attr)
	out.SetEntryTimeout(time.Nanosecond)
	return in, 0
}

func (c *ctlNode) attr(a *fuse.Attr) {
	a.Mode = syscall.S_IFREG | 0o644
	a.Nlink = 1
	a.Ino = c.StableAttr().Ino
	a.Uid = c.fs.cfg.Owner
}

// mayControl reports whether the caller of a request may act through the
// control file: its owner, root, or the daemon's own uid. The kernel checks
// opens for writing against the file's mode (default_permissions); an
// ioctl needs only a descriptor, so it is checked here.
func (c *ctlNode) mayControl(ctx context.Context) bool {
	caller, ok := fuse.FromContext(ctx)
	if !ok {
		return false
	}
	return caller.Uid == 0 || caller.Uid == c.fs.cfg.Owner || caller.Uid == uint32(os.Geteuid())
}

func (c *ctlNode) Getattr(ctx context.Context, f fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	c.attr(&out.Attr)
	out.SetTimeout(time.Nanosecond)
	return 0
}

func (c *ctlNode) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	c.attr(&out.Attr) // truncation from "echo > ctl" is accepted and ignored
	return 0
}

func (c *ctlNode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (c *ctlNode) Read(ctx context.Context, f fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	b, err := c.branch()
	if err != nil {
		return nil, ctlErrno(err)
	}
	s := "branch:" + b + "\n"
	if off >= int64(len(s)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData([]byte(s[off:])), 0
}

// branch is the branch the control file acts on.
func (c *ctlNode) branch() (string, error) {
	if c.view.br != nil {
		return c.view.br.Name, nil
	}
	return c.fs.Current(), nil
}

func (c *ctlNode) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if !c.mayControl(ctx) {
		return 0, syscall.EACCES
	}
	cmd := strings.TrimSpace(string(data))
	b, err := c.branch()
	if err != nil {
		return 0, ctlErrno(err)
	}
	atRoot := c.view.br == nil
	switch {
	case strings.HasPrefix(cmd, "create:"):
		name := cmd[len("create:"):]
		if err := c.fs.st.Fork(b, name); err != nil {
			return 0, ctlErrno(err)
		}
		if atRoot {
			c.fs.setCurrent(name)
		}
	case strings.HasPrefix(cmd, "switch:"):
		if !atRoot {
			return 0, syscall.EINVAL
		}
		if err := c.fs.Switch(cmd[len("switch:"):]); err != nil {
			return 0, ctlErrno(err)
		}
	case cmd == "commit":
		if _, err := c.fs.Commit(b, true); err != nil {
			return 0, ctlErrno(err)
		}
	case cmd == "abort":
		if err := c.fs.Abort(b); err != nil {
			return 0, ctlErrno(err)
		}
	default:
		return 0, syscall.EINVAL
	}
	return uint32(len(data)), 0
}

func (c *ctlNode) Ioctl(ctx context.Context, f fs.FileHandle, cmd uint32, arg uint64, input, output []byte) (int32, syscall.Errno) {
	if !c.mayControl(ctx) {
		return -1, syscall.EACCES
	}
	b, err := c.branch()
	if err != nil {
		return -1, ctlErrno(err)
	}
	switch cmd {
	case ioctlCreate:
		name := c.fs.newName()
		if err := c.fs.st.Fork(b, name); err != nil {
			return -1, ctlErrno(err)
		}
		if c.view.br == nil {
			c.fs.setCurrent(name)
		}
		for i := range output {
			output[i] = 0
		}
		copy(output, name)
		return 0, 0
	case ioctlCommit:
		if _, err := c.fs.Commit(b, true); err != nil {
			return -1, ctlErrno(err)
		}
		return 0, 0
	case ioctlAbort:
		if err := c.fs.Abort(b); err != nil {
			return -1, ctlErrno(err)
		}
		return 0, 0
	}
	return -1, syscall.ENOTTY
}

// ctlErrno maps a store error to the errno BranchFS gives: the errno it
// wraps, else its kind's in the api error table.
func ctlErrno(err error) syscall.Errno { return api.Errno(err) }
