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
	// MaxNodeRAMBytes and MaxNodePids limit each live node of a backend
	// that runs processes (jail: its sandbox's cgroup): the memory its
	// processes may hold, past which the kernel kills one (the exec's
	// exit says oom_killed), and the tasks (processes and threads) it may
	// run, past which fork fails with EAGAIN. MaxNodeRAMBytes defaults to
	// MaxLiveRAMBytes (no node may hold more than the whole tree may) and
	// may not exceed it; MaxNodePids defaults to DefaultBudget's and is at
	// least MinNodePids.
	MaxNodeRAMBytes int64 `json:"max_node_ram_bytes,omitempty"`
	MaxNodePids     int64 `json:"max_node_pids,omitempty"`
}

// MinNodePids is the least Budget.MaxNodePids: a sandbox's own init runs
// a few threads inside the limit.
const MinNodePids = 16

// DefaultBudget is k7d's default for live nodes and RAM, and 4,096 tasks
// per node (enough for a parallel build, not for a fork bomb). It sets no disk
// limit (k7d's is 32 GiB): a disk budget is enforced exactly, every write
// of the tree's branches metered by the daemon (no FUSE passthrough for
// writers, about 9x the cost of a 4 KiB write), so it is asked for, not
// imposed (docs/BENCHMARKS.md, the disk budget).
var DefaultBudget = Budget{MaxLiveNodes: 8, MaxLiveRAMBytes: 8 << 30, MaxNodePids: 4096}

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
	// Image is the root filesystem a jail tree's sandboxes run on (empty:
	// the host's), Network their network (empty: NetworkNone).
	Image   string `json:"image,omitempty"`
	Network string `json:"network,omitempty"`
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
	// Stdin is a tree_exec's whole standard input, when small; Input
	// streams it instead (or a file_write's data) as api.Input lines that
	// follow the request on the connection.
	Stdin []byte `json:"stdin,omitempty"`
	Input bool   `json:"input,omitempty"`
	// TTY runs the command on a pty of Rows x Cols (tree_exec; output is
	// one stream, "stdout"); Input lines may resize it.
	TTY  bool   `json:"tty,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
	// Detach starts the command in the background (tree_exec): the reply
	// names it (process_id) at once; it runs while the node is live, and
	// exec_list, exec_logs and exec_kill reach it.
	Detach    bool   `json:"detach,omitempty"`
	ProcessID string `json:"process_id,omitempty"`
	// Follow: exec_logs streams the process's output until it ends.
	Follow bool `json:"follow,omitempty"`

	// File verbs (file_read, file_write, ...): Path inside the node (a
	// dir node's files are its root; a jail node's are /workspace, with
	// /tmp its /tmp; a relative path is under the files), a file_write's
	// Data (small ones: Input streams a large one) and Mode (0: 0644 for a
	// file, 0755 for a directory), file_remove's Recursive, file_mkdir's
	// Parents.
	Path      string `json:"path,omitempty"`
	Data      []byte `json:"data_b64,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	Parents   bool   `json:"parents,omitempty"`

	// tree_create: the image a jail tree's sandboxes run on (empty or
	// "host": the host's root) and their network (NetworkNone, the
	// default, or NetworkOutbound). image_build, image_rm: Image names
	// the image; image_build builds it from Suite, Variant and Packages.
	Image    string   `json:"image,omitempty"`
	Network  string   `json:"network,omitempty"`
	Suite    string   `json:"suite,omitempty"`
	Variant  string   `json:"variant,omitempty"`
	Packages []string `json:"packages,omitempty"`

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
	Kind  string `json:"kind"`            // text, both (Aside holds theirs), type (Aside: PATH~theirs or PATH~ours)
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
	// StartNS is how long the child's sandbox took to start, where the
	// backend runs one per node and measures it (jail).
	StartNS int64 `json:"start_ns,omitempty"`
	// Processes says whether the child started with its source's running
	// processes (ProcessesCarried, ProcessesNotCarried); empty where the
	// tree's backend runs none (dir).
	Processes string `json:"processes,omitempty"`
}

// What a fork did with its source's processes (Fork.Processes).
const (
	// ProcessesCarried: the children run what the source ran, memory
	// and all (a microVM backend).
	ProcessesCarried = "carried"
	// ProcessesNotCarried: the children start with their source's files
	// (and a jail's /tmp) and nothing running.
	ProcessesNotCarried = "not carried"
)

// Response is one JSON-lines reply. Status is "ok", "error", or the verb's
// reply name (tree_created, tree_forked, ...); the other fields are set as the
// verb fills them.
type Response struct {
	Status    string `json:"status"`
	Code      string `json:"code,omitempty"`
	Message   string `json:"message,omitempty"`
	Version   string `json:"version,omitempty"`
	TreeID    string `json:"tree_id,omitempty"`
	NodeID    string `json:"node_id,omitempty"`
	Root      string `json:"root,omitempty"`
	Path      string `json:"path,omitempty"`
	LatencyNS int64  `json:"latency_ns,omitempty"`
	// PauseNS is how long a fork held its running source paused, where
	// the backend measures it (jail).
	PauseNS  int64    `json:"pause_ns,omitempty"`
	Forks    []Fork   `json:"forks,omitempty"`
	Nodes    []Node   `json:"nodes,omitempty"`
	Trees    []Tree   `json:"trees,omitempty"`
	Evicted  []string `json:"evicted,omitempty"`
	Stale    []string `json:"stale,omitempty"`
	Usage    *Usage   `json:"usage,omitempty"`
	Budget   *Budget  `json:"budget,omitempty"`
	Event    *Event   `json:"event,omitempty"`
	Branch   string   `json:"branch,omitempty"`
	Branches []Branch `json:"branches,omitempty"`
	Changes  []Change `json:"changes,omitempty"`
	// Conflicts: tree_rebase's paths left to resolve.
	Conflicts []Conflict `json:"conflicts,omitempty"`
	Mounts    []Mount    `json:"mounts,omitempty"`
	// Output is one chunk of a tree_exec's output (Status StatusExecOutput).
	Output *ExecOutput `json:"output,omitempty"`
	// Exit ends a tree_exec's stream (Status StatusExecExit).
	Exit *ExecExit `json:"exit,omitempty"`
	// Data is file_read's data, one chunk per line (base64 in JSON).
	Data []byte `json:"data_b64,omitempty"`
	// File describes the file a file verb read, wrote or made.
	File *FileInfo `json:"file,omitempty"`
	// Entries are file_list's, sorted by name.
	Entries []FileInfo `json:"entries,omitempty"`
	// ProcessID names a background process (tree_exec with detach,
	// exec_logs); ProcessList is exec_list's.
	ProcessID   string    `json:"process_id,omitempty"`
	ProcessList []Process `json:"process_list,omitempty"`
	// Images lists images (image_list); Image is the one image_build
	// built (Cached: it was built before from the same inputs).
	Images []Image `json:"images,omitempty"`
	Image  *Image  `json:"image,omitempty"`
	Cached bool    `json:"cached,omitempty"`
	// Progress is one line of an image_build's progress (Status
	// StatusImageProgress).
	Progress string `json:"progress,omitempty"`
	// AlreadyMounted: ws_mount found the same base already mounted at the
	// mountpoint (as a restarted daemon re-establishes it) and left it as is.
	AlreadyMounted bool `json:"already_mounted,omitempty"`
	// Processes is a fork's Fork.Processes, the same for all its children.
	Processes string `json:"processes,omitempty"`
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
	// OOMKilled: while the command ran, the kernel killed a process of
	// its node for the node's memory limit (the budget's
	// max_node_ram_bytes): the command itself, or one it waited for.
	OOMKilled bool `json:"oom_killed,omitempty"`
}

// Input is one line a client sends after a request with Input set: a
// chunk of the data (a file_write's content, a tree_exec's stdin), EOF
// after the last one, or a new window size for a tty exec.
type Input struct {
	Data []byte `json:"data,omitempty"` // base64 in JSON
	EOF  bool   `json:"eof,omitempty"`
	Rows uint16 `json:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty"`
}

// MaxInputChunk is the most data one Input line (or one file_read line)
// carries: its base64 stays well under the daemon's 1 MiB line limit.
const MaxInputChunk = 512 << 10

// Statuses of a file_read's streamed reply: StatusFileData lines, each a
// chunk of the file, then one "file_read" line with the last chunk and
// the file's description.
const StatusFileData = "file_data"

// FileInfo describes a file of a node.
type FileInfo struct {
	Name string `json:"name"` // its last path element
	Path string `json:"path,omitempty"`
	Type string `json:"type"` // file, dir, symlink, other
	Size int64  `json:"size"`
	// Mode is the permission bits (with setuid, setgid and sticky).
	Mode    uint32 `json:"mode"`
	IsDir   bool   `json:"is_dir,omitempty"`
	MTimeNS int64  `json:"mtime_unix_ns"`
	// Link is a symlink's target, as written.
	Link string `json:"link,omitempty"`
}

// File types of FileInfo.Type.
const (
	FileRegular = "file"
	FileDir     = "dir"
	FileSymlink = "symlink"
	FileOther   = "other"
)

// Process is a background process of a node (tree_exec with detach).
type Process struct {
	ID        string   `json:"process_id"`
	Pid       int      `json:"pid"` // in the node's PID namespace
	Argv      []string `json:"argv"`
	StartedNS int64    `json:"started_unix_ns"`
	// Exit is set once it ended (exec_list keeps the last few that did).
	Exit *ExecExit `json:"exit,omitempty"`
}

// ExecResult is the collected form of an exec over HTTP: its output (the
// last MaxExecCollect bytes of each stream, Truncated if more came) as
// UTF-8 text, or as base64 in StdoutB64/StderrB64 when it is not text.
type ExecResult struct {
	Status     string `json:"status"` // StatusExecExit
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	StdoutB64  []byte `json:"stdout_b64,omitempty"`
	StderrB64  []byte `json:"stderr_b64,omitempty"`
	Truncated  bool   `json:"truncated,omitempty"`
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	DurationNS int64  `json:"duration_ns"`
}

// MaxExecCollect bounds each stream of an ExecResult: a ring of the last
// bytes written.
const MaxExecCollect = 4 << 20

// Event is one change in a tree, streamed by tree_watch.
type Event struct {
	Seq    uint64 `json:"seq"`
	Kind   string `json:"kind"` // fork, commit, abort, protect, unprotect, suspend, resume, prune, evict, stale, drop, delete, create, mount, unmount, switch
	TreeID string `json:"tree_id"`
	NodeID string `json:"node_id,omitempty"`
	TimeNS int64  `json:"time_unix_ns"`
}

// Networks of a jail tree's sandboxes (tree_create's "network").
const (
	// NetworkNone: loopback only (the default).
	NetworkNone = "none"
	// NetworkOutbound: outbound connections through a user-mode stack
	// (pasta), which also maps the gateway's address to the host's
	// loopback.
	NetworkOutbound = "outbound"
)

// StatusImageProgress is the status of each streamed image_build
// progress line.
const StatusImageProgress = "image_progress"

// Image is a root filesystem image built from Debian packages.
type Image struct {
	Name string `json:"name"`
	// ID is the hash of the inputs it was built from.
	ID        string   `json:"id"`
	Suite     string   `json:"suite"`
	Variant   string   `json:"variant"`
	Packages  []string `json:"packages,omitempty"`
	Mirror    string   `json:"mirror"`
	HookID    string   `json:"hook_id,omitempty"`
	BuiltAtNS int64    `json:"built_at_unix_ns"`
	SizeBytes int64    `json:"size_bytes"`
}
