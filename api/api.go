// Package api holds Arbor's wire types and the two tables every face
// derives from: the verb table (Verbs: each verb's op, reply status,
// whether it is read-only, its request and reply fields, its HTTP route and
// body) and the error table (Errors: each sentinel's wire code, HTTP status
// and errno). Both the daemon's faces and the Go client import it; it
// imports only the standard library.
package api

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

// Budget limits a tree. A zero field means the default (DefaultBudget);
// the default disk budget is none (0): a tree's disk is counted, and
// limited only when a budget is given.
type Budget struct {
	MaxLiveNodes    int   `json:"max_live_nodes,omitempty"`
	MaxLiveRAMBytes int64 `json:"max_live_ram_bytes,omitempty"`
	MaxDiskBytes    int64 `json:"max_disk_bytes,omitempty"`
}

// DefaultBudget is k7d's default for live nodes and RAM. It sets no disk
// limit (k7d's is 32 GiB): a disk budget is enforced exactly, every write
// of the tree's branches metered by the daemon (no FUSE passthrough for
// writers, about 9x the cost of a 4 KiB write), so it is asked for, not
// imposed (docs/BENCHMARKS.md, the disk budget).
var DefaultBudget = Budget{MaxLiveNodes: 8, MaxLiveRAMBytes: 8 << 30}

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
	// HideControl: ws_mount serves no .branchfs_ctl files at all (not
	// even by name), for agents that must not change their branches.
	HideControl bool `json:"hide_control,omitempty"`
}

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
	// Meta: modified in its metadata only (mode, owner, times, xattrs);
	// its data is the fork point's.
	Meta bool `json:"meta,omitempty"`
	// Diff is a unified text diff of the path against the fork point
	// (tree_diff, for a regular text file within the caps).
	Diff string `json:"diff,omitempty"`
	// Note says why tree_diff gives no Diff for a changed regular file
	// (binary, too large, past the reply's total).
	Note string `json:"note,omitempty"`
}

// Conflict is one path tree_rebase could not merge by itself. The new
// node is not committable until each is resolved: a text file's conflict
// markers removed, or the other version kept Aside removed.
type Conflict struct {
	Path  string `json:"path"`
	Kind  string `json:"kind"`            // text, both (Aside holds theirs), type
	Aside string `json:"aside,omitempty"` // the path of the other version
}

// Mount is one workspace mount.
type Mount struct {
	Mountpoint string `json:"mountpoint"`
	Base       string `json:"base"`
	Branch     string `json:"branch"`
	TreeID     string `json:"tree_id,omitempty"` // the tree the mount is a view of
	NodeID     string `json:"node_id,omitempty"` // the node its root shows
}

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
	// Conflicts: tree_rebase's paths left to resolve.
	Conflicts []Conflict `json:"conflicts,omitempty"`
	Mounts    []Mount    `json:"mounts,omitempty"`
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
