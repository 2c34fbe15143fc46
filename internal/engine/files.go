package engine

import (
	"context"

	"github.com/arbor-dev/arbor/api"
)

// Files is one tree's file layer: each node's files are a branch. The root
// node's branch is "main"; every other node's branch is named by its node id.
//
// Errors wrap api sentinels: api.ErrNotFound for an unknown branch,
// api.ErrExists for a name already taken, api.ErrStale for a lost commit.
// Implementations are safe for concurrent use; the engine calls one tree's
// Files under that tree's mutex. internal/engine/filestest is the behaviour
// every implementation must show.
type Files interface {
	// Fork makes children of parent, each seeing parent's current files (O(1) in the real one).
	Fork(ctx context.Context, parent string, children []string) error
	// Commit applies child's changes to its parent atomically; if the parent changed since
	// child's fork it fails wrapping api.ErrStale. It returns the branches that became stale.
	// On success the child's branch is gone, in the same atomic step: the engine's crash
	// recovery tells a commit that happened from one that did not by the child's absence.
	Commit(ctx context.Context, child string) (stale []string, err error)
	// Abort drops the branch and its subtree.
	Abort(ctx context.Context, name string) error
	// Path is the host path where the branch's files can be read and written.
	Path(name string) (string, error)
	// Branches lists every branch the files layer holds (for reconcile after a crash).
	Branches() ([]string, error)
	// DiskUsage is the bytes each branch holds on disk now (or at most a
	// second ago), by branch name: what its own layers allocate, frozen or
	// not. The values sum to all the files layer holds besides the base.
	DiskUsage() map[string]int64
	// SetDiskLimit sets the tree's disk budget: a change that would take
	// the files layer past max bytes fails with ENOSPC (0: no limit).
	SetDiskLimit(max int64) error
	Close() error
}

// Freezer is a Files whose branches can refuse writes. The engine makes a
// suspended node's branch unwritable and a live one's writable again, so a
// suspended node's files cannot change behind the tree's back. The files
// layer of the dir backend (workspace.TreeFiles) implements it; a Files
// that does not cannot keep a suspended node's files still.
type Freezer interface {
	// SetWritable makes every change through the branch's Path fail with
	// EROFS (writable false), or work again.
	SetWritable(name string, writable bool) error
}

// OpenFiles opens (creating if need be) the files layer of one tree: dir is the tree's private
// directory under the daemon's home, base the user's base directory; the root branch is named "main".
type OpenFiles func(ctx context.Context, dir, base string) (Files, error)

// MainBranch is the root node's branch.
const MainBranch = "main"

// Viewer is a Files whose branches can be shown at a mountpoint the
// requester names: a view of the tree (arbor mount; BranchFS's control
// file and ioctls act through it). The dir backend's files layer
// (workspace.TreeFiles) implements it.
type Viewer interface {
	// MountView mounts a view at spec.Mountpoint, checked as the
	// requester (access.FromContext(ctx)): its root shows spec.Branch,
	// /@NAME every node that spec.Control resolves NAME to.
	MountView(ctx context.Context, spec ViewSpec) (View, error)
}

// ViewSpec is what MountView mounts.
type ViewSpec struct {
	Mountpoint string
	Branch     string // shown at the root
	Owner      uint32 // the uid the view's control files belong to
	Control    ViewControl
	// HideControl: the view serves no control files, not even by name.
	HideControl bool
}

// View is one mounted view.
type View interface {
	Mountpoint() string
	// Show makes the view's root show branch.
	Show(branch string)
	// Unmount unmounts the view; force ends a busy one's FUSE connection.
	Unmount(force bool) error
}

// ViewControl is what a view's control files ask of the engine (the
// method set of cowfs.Control). Branches are the files layer's names; a
// user's names (a BranchFS branch name is a node's label) are resolved by
// the engine. Calls come from inside the view's FUSE requests, and carry
// the caller's credentials in their context (access.WithCred).
type ViewControl interface {
	Create(ctx context.Context, parent, name string) (string, error)
	Commit(ctx context.Context, branch string) error
	Abort(ctx context.Context, branch string) error
	Switch(ctx context.Context, name string) error
	Resolve(name string) (branch string, ok bool)
	Name(branch string) string
}

// Differ is a Files that can list what a branch changed against its fork point.
type Differ interface {
	Diff(branch string) ([]api.Change, error)
}

// Rebaser is a Files that can replay a branch's changes (against its fork
// point) onto another branch, a fresh fork of the first one's parent
// (tree_rebase), merging what both changed and listing what it could not.
type Rebaser interface {
	Replay(from, into string) ([]api.Conflict, error)
}

// ContentDiffer is a Differ that can also give one changed path's content
// at the branch's fork point and now (tree_diff's text diffs).
type ContentDiffer interface {
	Differ
	// DiffFile gives path (as Diff names it) at the fork point (then) and
	// now, each one's data only if it is a regular file of at most max
	// bytes; a symlink is reported, never followed.
	DiffFile(branch, path string, max int64) (then, now FileVersion, err error)
}

// FileVersion is a path on one side of a branch's change.
type FileVersion struct {
	Exists  bool
	Regular bool   // a regular file: only then Size and Data
	Size    int64  // bytes
	Data    []byte // nil when Size is over the asked max
}

// Quotas is a Files that can cap what one branch's own layer holds.
type Quotas interface {
	SetQuota(branch string, bytes int64) error
}
