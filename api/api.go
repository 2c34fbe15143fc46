// Package api holds Arbor's wire types: the requests and replies of the tree
// verbs, the error codes, and the sentinel errors they map to. Both the
// daemon's faces and the Go client import it; it imports only the standard
// library.
package api

import (
	"errors"
	"fmt"
)

// Error codes carried on the wire in {"status":"error","code":...}.
const (
	CodeBadRequest = "bad_request"  // malformed input: unknown op, bad JSON, bad name
	CodeNotFound   = "not_found"    // unknown tree, node or branch
	CodeExists     = "exists"       // a tree or branch of that name already exists
	CodeStale      = "stale"        // lost a first-commit-wins race, or the node is stale
	CodeBudget     = "budget"       // the verb would exceed a budget that eviction cannot free
	CodeProtected  = "protected"    // the verb would delete or evict a protected node
	CodeState      = "bad_state"    // the node is in a state the verb does not apply to
	CodeBusy       = "busy"         // a resource is in use (an unmount of a busy mount)
	CodeNoSpace    = "no_space"     // a quota was reached
	CodeLimit      = "limit"        // a daemon limit: too many connections, or one closed for idling
	CodeAuth       = "unauthorized" // no or a wrong credential (HTTP token, a uid not admitted to the socket)
	CodeForbidden  = "forbidden"    // the requester may not name that path (a mountpoint or base rule refused it)
	// CodeUnavailable: the host cannot do it (no usable /dev/fuse, no
	// fusermount3); the message says what, arbor doctor how to fix it.
	CodeUnavailable = "unavailable"
	CodeInternal    = "internal"

	// CodeNotSupported: the tree's backend does not serve the verb (exec
	// on a dir tree); the message names a backend that would.
	CodeNotSupported = "not_supported"
)

// Sentinel errors. Errors returned by the engine wrap one of these; the faces
// map them to codes and the client maps codes back, so errors.Is works across
// the socket.
var (
	ErrBadRequest  = errors.New("bad request")
	ErrNotFound    = errors.New("not found")
	ErrExists      = errors.New("already exists")
	ErrStale       = errors.New("stale")
	ErrBudget      = errors.New("over budget")
	ErrProtected   = errors.New("protected")
	ErrState       = errors.New("wrong state")
	ErrBusy        = errors.New("busy")
	ErrNoSpace     = errors.New("no space")
	ErrLimit       = errors.New("limit reached")
	ErrAuth        = errors.New("unauthorized")
	ErrForbidden   = errors.New("forbidden")
	ErrUnavailable = errors.New("unavailable on this host")
	ErrInternal    = errors.New("internal error")

	ErrNotSupported = errors.New("not supported by this backend")
)

var codes = []struct {
	code string
	err  error
}{
	{CodeBadRequest, ErrBadRequest}, {CodeNotFound, ErrNotFound}, {CodeExists, ErrExists},
	{CodeStale, ErrStale}, {CodeBudget, ErrBudget}, {CodeProtected, ErrProtected},
	{CodeState, ErrState}, {CodeBusy, ErrBusy}, {CodeNoSpace, ErrNoSpace},
	{CodeLimit, ErrLimit}, {CodeAuth, ErrAuth}, {CodeForbidden, ErrForbidden}, {CodeUnavailable, ErrUnavailable}, {CodeInternal, ErrInternal},
	{CodeNotSupported, ErrNotSupported},
}

// Codes lists every wire code, in the error table's order. Tables derived
// from the error table (HTTP statuses, errnos, tests) are checked against it.
func Codes() []string {
	out := make([]string, len(codes))
	for i, c := range codes {
		out[i] = c.code
	}
	return out
}

// Sentinel returns the sentinel error of a wire code, and false for an
// unknown code.
func Sentinel(code string) (error, bool) {
	for _, c := range codes {
		if c.code == code {
			return c.err, true
		}
	}
	return nil, false
}

// Code returns the wire code for err: the code of the first sentinel it wraps,
// or CodeInternal.
func Code(err error) string {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return CodeInternal
}

// Error is an error received over the wire. It unwraps to the sentinel of its
// code.
type Error struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// Unwrap returns the sentinel error for the code.
func (e *Error) Unwrap() error {
	if err, ok := Sentinel(e.Code); ok {
		return err
	}
	return ErrInternal
}

// Errorf wraps a sentinel with a message: Errorf(ErrNotFound, "tree %q", id).
func Errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), sentinel)
}

// HTTPTokenFile is the file in the daemon's home ($ARBOR_HOME) that holds
// the HTTP face's bearer token when arbord was not given one: 64 hex
// digits (32 random bytes) and a newline, mode 0600, made at the first
// start that serves HTTP. Clients running as the daemon's user read it.
const HTTPTokenFile = "http.token"

// Node states.
const (
	StateLive      = "live"
	StateSuspended = "suspended"
	StateStale     = "stale"
)

// Budget limits a tree. A zero field means the default (DefaultBudget).
type Budget struct {
	MaxLiveNodes    int   `json:"max_live_nodes,omitempty"`
	MaxLiveRAMBytes int64 `json:"max_live_ram_bytes,omitempty"`
	MaxDiskBytes    int64 `json:"max_disk_bytes,omitempty"`
}

// DefaultBudget is k7d's default.
var DefaultBudget = Budget{MaxLiveNodes: 8, MaxLiveRAMBytes: 8 << 30, MaxDiskBytes: 32 << 30}

// Usage is what a node or tree holds.
type Usage struct {
	LiveNodes    int   `json:"live_nodes"`
	TotalNodes   int   `json:"total_nodes"`
	LiveRAMBytes int64 `json:"live_ram_bytes"`
	DiskBytes    int64 `json:"disk_bytes"`
}

// Node is one state of an environment, as tree_nodes reports it.
type Node struct {
	ID           string   `json:"id"`
	Parent       string   `json:"parent,omitempty"`
	Children     []string `json:"children"`
	State        string   `json:"state"`
	Label        string   `json:"label,omitempty"`
	Protected    bool     `json:"protected"`
	CreatedAt    int64    `json:"created_at_unix_ns"`
	LastActiveAt int64    `json:"last_active_at_unix_ns"`
	RAMBytes     int64    `json:"ram_bytes"`
	DiskBytes    int64    `json:"disk_bytes"`
	// Path is where the node's files can be read and written on the host
	// (empty unless live).
	Path string `json:"path,omitempty"`
}

// Tree summarises a tree, as tree_list reports it.
type Tree struct {
	ID      string `json:"tree_id"`
	Base    string `json:"base"`
	Backend string `json:"backend"`
	Root    string `json:"root"`
	// OwnerUID made the tree: it, root and the daemon's uid drive it.
	OwnerUID uint32 `json:"owner_uid"`
	Usage    Usage  `json:"usage"`
	Budget   Budget `json:"budget"`
}

// Request is one JSON-lines request; Op selects the verb and the other fields
// are its arguments (unused ones are omitted).
type Request struct {
	Op       string   `json:"op"`
	TreeID   string   `json:"tree_id,omitempty"`
	NodeID   string   `json:"node_id,omitempty"`
	SourceID string   `json:"source_id,omitempty"`
	Label    string   `json:"label,omitempty"`
	Labels   []string `json:"labels,omitempty"`
	Base     string   `json:"base,omitempty"`
	Backend  string   `json:"backend,omitempty"`
	Budget   *Budget  `json:"budget,omitempty"`

	// tree_exec: the command, its environment (KEY=VALUE), its working
	// directory inside the node and its timeout (0: none).
	Argv      []string `json:"argv,omitempty"`
	Env       []string `json:"env,omitempty"`
	Cwd       string   `json:"cwd,omitempty"`
	TimeoutNS int64    `json:"timeout_ns,omitempty"`

	// Workspace ops (arbor mount, create, ...): the mount and branch they act on.
	Mountpoint string `json:"mountpoint,omitempty"`
	Branch     string `json:"branch,omitempty"`
	Parent     string `json:"parent,omitempty"`
	Durable    *bool  `json:"durable,omitempty"`
	QuotaBytes int64  `json:"quota_bytes,omitempty"`
	// NoSwitch: ws_create leaves the mount where it is (a create through
	// a control file, as BranchFS's CREATE ioctl); otherwise a branch made
	// from the one the mount shows is shown next (arbor create).
	NoSwitch bool `json:"no_switch,omitempty"`
}

// Workspace ops, behind the arbor mount/create/diff/commit/abort/switch/list/unmount commands.
const (
	OpWsMount   = "ws_mount"
	OpWsUnmount = "ws_unmount"
	OpWsCreate  = "ws_create"
	OpWsCommit  = "ws_commit"
	OpWsAbort   = "ws_abort"
	OpWsSwitch  = "ws_switch"
	OpWsList    = "ws_list"
	OpWsDiff    = "ws_diff"
	OpWsMounts  = "ws_mounts"
)

// Branch is one branch of a workspace mount, as ws_list reports it.
type Branch struct {
	Name    string `json:"name"`
	Parent  string `json:"parent,omitempty"`
	State   string `json:"state"` // live or stale
	Current bool   `json:"current,omitempty"`
	NodeID  string `json:"node_id,omitempty"` // the tree node the branch is
}

// Change is one path a branch changed against its fork point.
type Change struct {
	Kind string `json:"kind"` // added, modified, deleted
	Path string `json:"path"`
}

// Mount is one workspace mount.
type Mount struct {
	Mountpoint string `json:"mountpoint"`
	Base       string `json:"base"`
	Branch     string `json:"branch"`
	TreeID     string `json:"tree_id,omitempty"` // the tree the mount is a view of
	NodeID     string `json:"node_id,omitempty"` // the node its root shows
}

// Ops, with k7d's names.
const (
	OpPing         = "ping"
	OpTreeCreate   = "tree_create"
	OpTreeFork     = "tree_fork"
	OpTreeForkBat  = "tree_fork_batch"
	OpTreeCommit   = "tree_commit"
	OpTreeAbort    = "tree_abort"
	OpTreeRollback = "tree_rollback"
	OpTreeProtect  = "tree_protect"
	OpTreeUnprot   = "tree_unprotect"
	OpTreePrune    = "tree_prune"
	OpTreeSuspend  = "tree_suspend"
	OpTreeResume   = "tree_resume"
	OpTreeEvict    = "tree_auto_evict"
	OpTreeNodes    = "tree_nodes"
	OpTreeList     = "tree_list"
	OpTreeWatch    = "tree_watch"
	// OpTreeDrop forgets a tree but keeps it on disk (tree_open reloads it).
	OpTreeDrop = "tree_drop"
	// OpTreeDelete removes a tree for good: its nodes, its layers and its
	// metadata (the base directory stays as it is).
	OpTreeDelete = "tree_delete"
	OpTreeOpen   = "tree_open"
	// OpTreeExec runs a command in a live node's sandbox; its reply is a
	// stream (StatusExecOutput lines, then one StatusExecExit line), like
	// tree_watch's.
	OpTreeExec = "tree_exec"
	// OpShutdown asks the daemon to exit (arbor daemon stop); only root and
	// the daemon's own uid may, and only over the socket.
	OpShutdown = "shutdown"
)

// Fork is one child made by a fork.
type Fork struct {
	NodeID    string `json:"node_id"`
	Label     string `json:"label,omitempty"`
	Path      string `json:"path,omitempty"`
	LatencyNS int64  `json:"latency_ns"`
}

// Response is one JSON-lines reply. Status is "ok", "error", or the verb's
// reply name (tree_created, tree_forked, ...); the other fields are set as the
// verb fills them.
type Response struct {
	Status    string   `json:"status"`
	Code      string   `json:"code,omitempty"`
	Message   string   `json:"message,omitempty"`
	Version   string   `json:"version,omitempty"`
	TreeID    string   `json:"tree_id,omitempty"`
	NodeID    string   `json:"node_id,omitempty"`
	Root      string   `json:"root,omitempty"`
	Path      string   `json:"path,omitempty"`
	LatencyNS int64    `json:"latency_ns,omitempty"`
	Forks     []Fork   `json:"forks,omitempty"`
	Nodes     []Node   `json:"nodes,omitempty"`
	Trees     []Tree   `json:"trees,omitempty"`
	Evicted   []string `json:"evicted,omitempty"`
	Stale     []string `json:"stale,omitempty"`
	Usage     *Usage   `json:"usage,omitempty"`
	Budget    *Budget  `json:"budget,omitempty"`
	Event     *Event   `json:"event,omitempty"`
	Branch    string   `json:"branch,omitempty"`
	Branches  []Branch `json:"branches,omitempty"`
	Changes   []Change `json:"changes,omitempty"`
	Mounts    []Mount  `json:"mounts,omitempty"`
	// Output is one chunk of a tree_exec's output (Status StatusExecOutput).
	Output *ExecOutput `json:"output,omitempty"`
	// Exit ends a tree_exec's stream (Status StatusExecExit).
	Exit *ExecExit `json:"exit,omitempty"`
	// AlreadyMounted: ws_mount found the same base already mounted at the
	// mountpoint (as a restarted daemon re-establishes it) and left it as is.
	AlreadyMounted bool `json:"already_mounted,omitempty"`
}

// OK is the Status of a reply that carries nothing but success.
const StatusOK = "ok"

// StatusError is the Status of an error reply.
const StatusError = "error"

// Statuses of a tree_exec's streamed reply lines.
const (
	StatusExecOutput = "tree_exec_output"
	StatusExecExit   = "tree_exec_exit"
)

// ExecOutput is one chunk of a command's output, in the order the command
// wrote it.
type ExecOutput struct {
	Stream string `json:"stream"` // "stdout" or "stderr"
	Data   []byte `json:"data"`   // base64 in JSON
}

// ExecExit is how a command ended.
type ExecExit struct {
	// ExitCode is the command's exit status; -1 when a signal ended it.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that ended it ("KILL"), empty otherwise.
	Signal     string `json:"signal,omitempty"`
	DurationNS int64  `json:"duration_ns"`
}

// Event is one change in a tree, streamed by tree_watch.
type Event struct {
	Seq    uint64 `json:"seq"`
	Kind   string `json:"kind"` // fork, commit, abort, protect, unprotect, suspend, resume, prune, evict, stale, drop, delete, create, mount, unmount, switch
	TreeID string `json:"tree_id"`
	NodeID string `json:"node_id,omitempty"`
	TimeNS int64  `json:"time_unix_ns"`
}
