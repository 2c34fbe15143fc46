package cowfs

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Setuid and setgid are cleared exactly when Linux clears them: at a write,
// a truncation or an O_TRUNC open by a caller without CAP_FSETID (and
// setgid only on a group-executable file), and at a chown. The mount asks
// for FUSE_HANDLE_KILLPRIV_V2, so the kernel leaves that to us and says in
// each request whether its caller lacks CAP_FSETID: WRITE_KILL_SUIDGID in a
// write, OPEN_KILL_SUIDGID in an open, FATTR_KILL_SUIDGID in a setattr. A
// chown the daemon makes as root clears the bits itself, as the kernel does.
// go-fuse's node API passes a write's and an open's flags to no one, so
// killFS keeps them, for the time the request runs, keyed by its cancel
// channel (one per request in flight), where killAsked finds them.
//
// Passthrough writes reach no request: a descriptor opened for writing on a
// file with a bit a write would clear is served by the daemon instead
// (privServed), with FOPEN_DIRECT_IO so that it can share its kernel inode
// with passthrough readers. Such files are rare; every other writer keeps
// passthrough.
type killFS struct {
	fuse.RawFileSystem
	kills *kills
}

// kills is the set of requests in flight whose caller lacks CAP_FSETID.
type kills struct{ m sync.Map } // <-chan struct{} -> struct{}

func (k *kills) during(cancel <-chan struct{}, kill bool) func() {
	if !kill {
		return func() {}
	}
	k.m.Store(cancel, struct{}{})
	return func() { k.m.Delete(cancel) }
}

func (k *killFS) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer k.kills.during(cancel, in.WriteFlags&fuse.WRITE_KILL_SUIDGID != 0)()
	return k.RawFileSystem.Write(cancel, in, data)
}

func (k *killFS) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	defer k.kills.during(cancel, in.WriteFlags&fuse.WRITE_KILL_SUIDGID != 0)()
	return k.RawFileSystem.Writev(cancel, in, data)
}

func (k *killFS) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer k.kills.during(cancel, in.Mode&fuse.OPEN_KILL_SUIDGID != 0)() // OpenIn.Mode holds the open_flags
	return k.RawFileSystem.Open(cancel, in, out)
}

// killAsked reports whether the kernel asked the request ctx belongs to to
// clear setuid and setgid (its caller lacks CAP_FSETID).
func (f *FS) killAsked(ctx context.Context) bool {
	c, ok := ctx.(*fuse.Context)
	if !ok || c.Cancel == nil {
		return false
	}
	_, kill := f.kills.m.Load(c.Cancel)
	return kill
}

// killOnSetattr reports whether a setattr's FATTR_KILL_SUIDGID is ours to
// act on. The kernel sets it at a truncation by a caller without
// CAP_FSETID, and at every chown of a non-directory: a chown the daemon
// makes as root has cleared what a chown by root clears (S_ISUID, S_ISGID
// if group-executable), and root keeps the rest; another caller's chown
// clears by privKilled's rule.
func killOnSetattr(ctx context.Context, in *fuse.SetAttrIn) bool {
	if in.Valid&fuse.FATTR_KILL_SUIDGID == 0 {
		return false
	}
	if in.Valid&(fuse.FATTR_UID|fuse.FATTR_GID) != 0 {
		c, ok := fuse.FromContext(ctx)
		return ok && c.Uid != 0
	}
	return true
}

// privServed reports whether a writer of the file st describes must be
// served by the daemon: a write may clear a bit of it.
func privServed(st *unix.Stat_t) bool {
	return st.Mode&unix.S_IFMT == unix.S_IFREG && st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0
}

// killPriv clears on fd what a write or a truncation by the caller of ctx
// (the kernel said it lacks CAP_FSETID) clears (see privKilled).
func killPriv(ctx context.Context, fd int) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return
	}
	if m, kill := privKilled(ctx, &st); kill {
		unix.Fchmod(fd, m)
	}
}

// privKilled is the permission bits of st without what a write or a
// truncation by the caller of ctx, without CAP_FSETID, clears, and whether
// that is anything: S_ISUID, and S_ISGID if the file is group-executable or
// the caller is not in the file's group (regular files only; Linux's
// setattr_should_drop_sgid).
func privKilled(ctx context.Context, st *unix.Stat_t) (uint32, bool) {
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return 0, false
	}
	kill := uint32(unix.S_ISUID)
	if st.Mode&unix.S_ISGID != 0 && (st.Mode&unix.S_IXGRP != 0 || !inGroup(ctx, st.Gid)) {
		kill |= unix.S_ISGID
	}
	return st.Mode & 07777 &^ kill, st.Mode&kill != 0
}

// inGroup reports whether the caller of ctx is in group gid: its gid, or
// one of its supplementary groups (read from /proc; a caller gone is in
// none).
func inGroup(ctx context.Context, gid uint32) bool {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return false
	}
	if c.Gid == gid {
		return true
	}
	data, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(c.Pid), 10) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if groups, ok := strings.CutPrefix(line, "Groups:"); ok {
			for _, g := range strings.Fields(groups) {
				if g == strconv.FormatUint(uint64(gid), 10) {
					return true
				}
			}
			return false
		}
	}
	return false
}
