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

// Control serves a mount's control files when Config.Control is set. Each
// call runs inside the FUSE request that asked (ctx carries its caller:
// fuse.FromContext) and names branches by the store's names; a user's
// name (create:NAME, switch:NAME, /@NAME) is passed as written. What a
// call changes reaches this mount through the store and the owner (Show,
// Committed, Aborted), not through its return. It must not hold up an
// unmount of this mount: see the engine's views.
type Control interface {
	// Create forks parent into a new branch called name (none: the
	// branch is known by its store name) and returns its store name;
	// whether the mount then shows it is the Control's rule.
	Create(ctx context.Context, parent, name string) (string, error)
	// Commit commits branch into its parent; Abort drops it and its subtree.
	Commit(ctx context.Context, branch string) error
	Abort(ctx context.Context, branch string) error
	// Switch makes the mount root show the branch a user's name names.
	Switch(ctx context.Context, name string) error
	// Resolve is the store branch that a user's name names (/@NAME).
	Resolve(name string) (branch string, ok bool)
	// Name is how the control file shows a store branch.
	Name(branch string) string
}

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
	if ctl := c.fs.cfg.Control; ctl != nil {
		b = ctl.Name(b)
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
	if ctl := c.fs.cfg.Control; ctl != nil {
		if errno := c.control(ctx, ctl, cmd, b, atRoot); errno != 0 {
			return 0, errno
		}
		return uint32(len(data)), 0
	}
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
	if ctl := c.fs.cfg.Control; ctl != nil {
		switch cmd {
		case ioctlCreate:
			name, err := ctl.Create(ctx, b, "")
			if err != nil {
				return -1, ctlErrno(err)
			}
			for i := range output {
				output[i] = 0
			}
			copy(output, ctl.Name(name))
			return 0, 0
		case ioctlCommit:
			return ctlResult(ctl.Commit(ctx, b))
		case ioctlAbort:
			return ctlResult(ctl.Abort(ctx, b))
		}
		return -1, syscall.ENOTTY
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

// control serves a control-file write through ctl (see Write).
func (c *ctlNode) control(ctx context.Context, ctl Control, cmd, b string, atRoot bool) syscall.Errno {
	var err error
	switch {
	case strings.HasPrefix(cmd, "create:"):
		_, err = ctl.Create(ctx, b, cmd[len("create:"):])
	case strings.HasPrefix(cmd, "switch:"):
		if !atRoot {
			return syscall.EINVAL
		}
		err = ctl.Switch(ctx, cmd[len("switch:"):])
	case cmd == "commit":
		err = ctl.Commit(ctx, b)
	case cmd == "abort":
		err = ctl.Abort(ctx, b)
	default:
		return syscall.EINVAL
	}
	if err != nil {
		return ctlErrno(err)
	}
	return 0
}

func ctlResult(err error) (int32, syscall.Errno) {
	if err != nil {
		return -1, ctlErrno(err)
	}
	return 0, 0
}

// ctlErrno maps a store error to the errno BranchFS gives: the errno it
// wraps, else its kind's in the api error table.
func ctlErrno(err error) syscall.Errno { return api.Errno(err) }
