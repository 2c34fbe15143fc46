package engine

import (
	"context"
	"io"
	"time"

	"github.com/arbor-dev/arbor/api"
)

// Backend is one tree's sandbox layer: what each node runs over its files.
// Files holds a node's files; the Backend holds the rest of its state: nothing
// for dir, a process sandbox for jail, a microVM for vm. Nodes are named by
// their node ids ("n1", ...), never by branch names.
//
// ctx bounds one call, never what the call starts: a sandbox lives until
// Stop, Suspend or Close, whatever happens to the request that started it.
// Errors wrap api sentinels: api.ErrNotFound for a node the backend does not
// hold, api.ErrExists for one it already holds, api.ErrState for a node in
// the wrong state, api.ErrNotSupported for a verb it does not serve.
//
// The engine calls one tree's Backend under that tree's mutex, except Exec,
// which runs outside it, concurrently with every other call (on the same
// node too). Implementations are safe for concurrent use.
// internal/engine/backendtest is the behaviour every implementation must
// show.
type Backend interface {
	// Caps says what the backend serves.
	Caps() Caps
	// Start makes node live over its files at path, with nothing running
	// in it yet (a new tree's root; a live node whose sandbox was lost, by
	// the LostRestart rule).
	Start(ctx context.Context, node, path string) error
	// Fork makes children of source (live or suspended) inside the
	// source's pause: it pauses source if it runs, calls files (which
	// forks the nodes' files and returns each child's files path, in
	// children's order), starts every child over its path from source's
	// state as of the pause, and resumes source. A failed step undoes the
	// backend's part (the children it started are stopped, source runs
	// again) and Fork returns the error, wrapping files' own.
	Fork(ctx context.Context, source string, children []string, files func(ctx context.Context) (paths []string, err error)) error
	// Suspend stops everything node runs and keeps its state, freeing its
	// RAM; the node is held suspended until Resume or Stop.
	Suspend(ctx context.Context, node string) error
	// Resume makes suspended node live again over its files at path. A
	// node the backend holds nothing for is started afresh, as by Start.
	Resume(ctx context.Context, node, path string) error
	// Commit makes what the backend keeps of child besides its files (a
	// jail's /tmp, a VM's memory) its parent's. The engine calls it with
	// child suspended, after the files committed (the commit point), and
	// again at the next open if a crash came before the commit's metadata
	// was saved: it must be idempotent. The engine stops child after it;
	// the backend may hold child no more by then. A backend that keeps
	// nothing besides the files does nothing.
	Commit(ctx context.Context, child, parent string) error
	// Stop ends node for good: everything it runs is killed (every
	// descendant process) and its state dropped. Idempotent: stopping a
	// node the backend does not hold succeeds.
	Stop(ctx context.Context, node string) error
	// Exec runs cmd in live node and reports how it ended. Output goes to
	// out as it comes, from one goroutine at a time; an error from out
	// ends the command. The command ends (killed) when ctx ends, when its
	// Timeout passes (reported as Signal "KILL") or when the node is
	// suspended or stopped. A backend without Caps.Exec returns an error
	// wrapping api.ErrNotSupported that names a backend that would serve it.
	Exec(ctx context.Context, node string, cmd Command, out func(api.ExecOutput) error) (api.ExecExit, error)
	// RAM is the real memory each node the backend holds live uses now, in
	// bytes, by node id (resident; proportional where pages are shared,
	// so that children sharing their source's pages are not counted N
	// times). A node that holds none may be absent.
	RAM(ctx context.Context) (map[string]int64, error)
	// Nodes lists every node the backend holds, live or suspended, for
	// reconcile after a crash: it includes nodes left by an earlier run
	// of the daemon that the backend could find again.
	Nodes(ctx context.Context) ([]HeldNode, error)
	// Close stops everything the backend runs (the engine closes, the
	// tree is dropped or deleted). What it keeps on disk (a suspended
	// node's state) stays for the next OpenBackend.
	Close() error
}

// DiskUser is a Backend that keeps node state on disk besides the files (a
// jail's /tmp): the engine adds it to each node's disk usage, so the
// tree's disk budget counts it. A backend that is one limits what it keeps
// by the budget's MaxDiskBytes itself.
type DiskUser interface {
	// DiskUsage is the bytes each node's state holds on disk now (or at
	// most a second ago), by node id.
	DiskUsage() map[string]int64
}

// OpenBackend opens one tree's backend. ctx is the engine's lifetime, not a
// request's: it ends when the engine closes, and the backend may bind what
// it runs to it. OpenBackend finishes or undoes what a crash cut short
// inside the backend (a source left paused by a fork is resumed); what the
// tree and the backend disagree about is the engine's reconcile (see
// doc.go).
type OpenBackend func(ctx context.Context, cfg BackendConfig) (Backend, error)

// BackendConfig is what a backend is opened with, the same at every open of
// its tree. A backend's own per-tree options (a jail's image) belong here,
// recorded with the tree at tree_create.
type BackendConfig struct {
	// Tree is the tree's id (for names: cgroups, hostnames).
	Tree string
	// Dir is the backend's private directory, under the tree's (the
	// engine makes it); what the backend keeps on disk goes there.
	Dir string
	// Base is the tree's base directory.
	Base string
	// Image names the root filesystem image the tree's sandboxes run on
	// (empty: the host's root), Network their network (empty: none, or
	// api.NetworkOutbound). A backend that cannot honour them refuses to
	// open with an error wrapping api.ErrBadRequest (api.ErrNotFound for
	// an image that does not exist).
	Image   string
	Network string
	// Budget is the tree's budget, its defaults filled in: a backend that
	// runs processes limits each node by its MaxNodeRAMBytes and
	// MaxNodePids.
	Budget api.Budget
}

// Caps is what a backend serves.
type Caps struct {
	// Exec: the backend runs commands. Without it Exec fails with
	// api.ErrNotSupported, and the conformance suite skips the exec tests.
	Exec bool
	// ForkCarriesMemory: a child starts with its source's memory (vm), so
	// a new child is expected to hold what its source holds until it is
	// measured. Otherwise a new node is expected to hold StartRAM.
	ForkCarriesMemory bool
	// StartRAM is the RAM a freshly started node is expected to hold.
	StartRAM int64
	// Lost is the rule for a node the tree holds live whose sandbox is
	// gone (the daemon was killed, or closed): LostRestart or LostSuspend.
	Lost LostRule
}

// ForkProcesses is what a fork's reply says of the source's processes
// (api.Fork.Processes): carried with its memory, not carried by a backend
// that runs commands without carrying them, nothing for one that runs
// none.
func (c Caps) ForkProcesses() string {
	switch {
	case c.ForkCarriesMemory:
		return api.ProcessesCarried
	case c.Exec:
		return api.ProcessesNotCarried
	}
	return ""
}

// LostRule says what reconcile makes of a live node whose sandbox is gone.
type LostRule int

const (
	// LostRestart starts a fresh sandbox over the node's files (Start):
	// nothing the backend runs outlives it (dir, jail).
	LostRestart LostRule = iota
	// LostSuspend marks the node suspended (saved in the tree): its state
	// is on disk and tree_resume brings it back (vm).
	LostSuspend
)

// Command is what Exec runs.
type Command struct {
	Argv []string
	Env  []string // KEY=VALUE
	// Cwd is the working directory, relative to the node's files (the
	// backend maps it, /workspace/Cwd in a jail, and keeps it inside the
	// node); "" means their top.
	Cwd string
	// Timeout ends the command with SIGKILL; 0 means none.
	Timeout time.Duration
	// Stdin is the command's standard input; nil means an empty one
	// (tree_exec's stdin, or the input lines a face forwards).
	Stdin io.Reader
	// TTY runs the command on a new pty of Rows x Cols (its output comes
	// as "stdout"), resized to each size Resize sends. A backend without
	// ptys fails it with api.ErrNotSupported.
	TTY        bool
	Rows, Cols uint16
	Resize     <-chan WindowSize
}

// WindowSize is a pty's size.
type WindowSize struct{ Rows, Cols uint16 }

// Processes is a Backend that runs background processes in a node
// (tree_exec with detach): they run while the node is live and end with
// it (suspend, stop). Without it, detach is api.ErrNotSupported.
type Processes interface {
	// Spawn starts cmd in live node in the background and returns once
	// it runs; cmd.Timeout, if set, kills it.
	Spawn(ctx context.Context, node string, cmd Command) (api.Process, error)
	// ProcessList lists node's background processes: those that run, and
	// the last few that ended (with Exit).
	ProcessList(ctx context.Context, node string) ([]api.Process, error)
	// Kill kills background process id of node and every process it
	// started. Killing one that ended succeeds.
	Kill(ctx context.Context, node, id string) error
	// Logs sends what process id wrote (the last of it the backend
	// keeps, in order) to out, then with follow what it writes until it
	// ends; it returns its exit once it ended, nil while it runs.
	Logs(ctx context.Context, node, id string, follow bool, out func(api.ExecOutput) error) (*api.ExecExit, error)
}

// HeldNode is one node a backend holds.
type HeldNode struct {
	ID    string
	State HeldState
}

// HeldState is a backend's view of a node.
type HeldState string

// What a backend holds of a node.
const (
	HeldLive      HeldState = "live"
	HeldSuspended HeldState = "suspended"
)
