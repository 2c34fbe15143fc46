package access

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"

	"golang.org/x/sys/unix"
)

// Cred is who asks: the credentials the daemon checks a path against.
type Cred struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"` // supplementary groups
}

func (c Cred) String() string { return fmt.Sprintf("uid %d", c.UID) }

// same reports whether c and o are the same credentials (groups in any order).
func (c Cred) same(o Cred) bool {
	if c.UID != o.UID || c.GID != o.GID || len(c.Groups) != len(o.Groups) {
		return false
	}
	a, b := slices.Clone(c.Groups), slices.Clone(o.Groups)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// Self returns the daemon's own credentials (effective uid and gid, and its
// supplementary groups).
func Self() Cred {
	c := Cred{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid())}
	if gs, err := unix.Getgroups(); err == nil {
		for _, g := range gs {
			c.Groups = append(c.Groups, uint32(g))
		}
	}
	return c
}

type credKey struct{}

// WithCred returns ctx carrying the requester's credentials.
func WithCred(ctx context.Context, c Cred) context.Context {
	return context.WithValue(ctx, credKey{}, c)
}

// FromContext returns the requester's credentials, if a face set them.
func FromContext(ctx context.Context) (Cred, bool) {
	c, ok := ctx.Value(credKey{}).(Cred)
	return c, ok
}

// as runs fn with c's filesystem credentials: on a fresh OS thread whose
// fsuid, fsgid and supplementary groups are c's (all three are per-thread
// in Linux; x/sys/unix calls them for this thread only, unlike package
// syscall's Setgroups). The thread never runs another goroutine: this one
// exits while still locked to it, and the runtime then ends the thread.
func (r *Rules) as(c Cred, fn func() error) error {
	if c.same(r.self) {
		return fn()
	}
	if r.self.UID != 0 {
		return errNotRoot
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked, on purpose
		done <- func() error {
			gs := make([]int, len(c.Groups))
			for i, g := range c.Groups {
				gs[i] = int(g)
			}
			if err := unix.Setgroups(gs); err != nil {
				return fmt.Errorf("setgroups: %w", err)
			}
			unix.SetfsgidRetGid(int(c.GID))
			unix.SetfsuidRetUid(int(c.UID))
			// setfsuid and setfsgid report no failure: read them back
			// (an invalid id changes nothing and returns the current one).
			if got, _ := unix.SetfsgidRetGid(-1); got != int(c.GID) {
				return fmt.Errorf("setfsgid %d: fsgid is %d", c.GID, got)
			}
			if got, _ := unix.SetfsuidRetUid(-1); got != int(c.UID) {
				return fmt.Errorf("setfsuid %d: fsuid is %d", c.UID, got)
			}
			return fn()
		}()
	}()
	return <-done
}

// Resolve is p with its symlinks resolved as c would resolve them (on a
// thread with c's credentials), so that what lies behind a directory c
// cannot search is never resolved for c, nor named in a refusal.
func (r *Rules) Resolve(c Cred, p string) (string, error) {
	var out string
	err := r.as(c, func() error {
		var err error
		out, err = filepath.EvalSymlinks(p)
		return err
	})
	return out, err
}
