package api

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Ops, with k7d's names: the "op" of a JSON-lines request.
const (
	OpPing          = "ping"
	OpTreeCreate    = "tree_create"
	OpTreeFork      = "tree_fork"
	OpTreeForkBatch = "tree_fork_batch"
	OpTreeCommit    = "tree_commit"
	OpTreeAbort     = "tree_abort"
	OpTreeRollback  = "tree_rollback"
	OpTreeProtect   = "tree_protect"
	OpTreeUnprotect = "tree_unprotect"
	OpTreePrune     = "tree_prune"
	OpTreeSuspend   = "tree_suspend"
	OpTreeResume    = "tree_resume"
	OpTreeAutoEvict = "tree_auto_evict"
	OpTreeNodes     = "tree_nodes"
	OpTreeList      = "tree_list"
	OpTreeWatch     = "tree_watch"
	OpTreeDrop      = "tree_drop"   // forget a tree but keep it on disk (tree_open reloads it)
	OpTreeDelete    = "tree_delete" // remove a tree for good: nodes, layers, metadata (the base stays)
	OpTreeOpen      = "tree_open"
	OpTreeDiff      = "tree_diff"   // what a node changed against its fork point, with text diffs
	OpTreeRebase    = "tree_rebase" // a (stale) node's changes re-applied on its parent's state now, as a new node
	// OpTreeExec runs a command in a live node's sandbox; its reply is a
	// stream (StatusExecOutput lines, then one StatusExecExit line), like
	// tree_watch's.
	OpTreeExec = "tree_exec"
	// OpImageBuild builds a root filesystem image; its reply is a stream
	// of StatusImageProgress lines, then one "image_built".
	OpImageBuild = "image_build"
	OpImageList  = "image_list"
	OpImageRm    = "image_rm"
	OpShutdown   = "shutdown" // ask the daemon to exit: root and the daemon's uid, over the socket only
	OpWsMount    = "ws_mount" // workspace ops, behind arbor mount/create/diff/commit/abort/switch/list/unmount
	OpWsUnmount  = "ws_unmount"
	OpWsCreate   = "ws_create"
	OpWsCommit   = "ws_commit"
	OpWsAbort    = "ws_abort"
	OpWsSwitch   = "ws_switch"
	OpWsList     = "ws_list"
	OpWsDiff     = "ws_diff"
	OpWsMounts   = "ws_mounts"

	// The files of a node (paths resolved inside the node, never outside).
	// file_read's reply is a stream (StatusFileData lines, then one
	// "file_read" line); file_write's data may follow the request as
	// api.Input lines (Request.Input).
	OpFileRead   = "file_read"
	OpFileWrite  = "file_write"
	OpFileList   = "file_list"
	OpFileStat   = "file_stat"
	OpFileRemove = "file_remove"
	OpFileMkdir  = "file_mkdir"
	// The background processes of a node (tree_exec with detach).
	OpExecList = "exec_list"
	OpExecKill = "exec_kill"
	OpExecLogs = "exec_logs" // a stream, like tree_exec's
)

// Reply statuses the faces and clients name.
const (
	StatusEvent      = "tree_event"    // each streamed tree_watch event line
	StatusWatching   = "tree_watching" // tree_watch's snapshot reply
	statusTreeForked = "tree_forked"
)

// Deprecated names, kept only so that branches written before the rename
// still build when they merge; use the names above.
const (
	OpTreeForkBat = OpTreeForkBatch // Deprecated: OpTreeForkBatch.
	OpTreeUnprot  = OpTreeUnprotect // Deprecated: OpTreeUnprotect.
	OpTreeEvict   = OpTreeAutoEvict // Deprecated: OpTreeAutoEvict.
)

// Verb is one row of the verb table: everything a face needs to know of a
// verb. The faces, the Go client and the engine derive from the table or
// are checked against it by tests (httpapi's OpenAPI document included).
type Verb struct {
	Op string // the JSON-lines "op"
	// Reply is the Status of a success reply ("tree_forked").
	Reply string
	// ReadOnly: the verb changes nothing, so repeating it is harmless (the
	// client retries it once on a fresh connection).
	ReadOnly bool
	// Stream: the reply is a snapshot followed by events (tree_watch).
	Stream bool
	// Request lists the Request fields the verb reads (JSON names),
	// ReplyFields the Response fields its success reply may set.
	Request, ReplyFields []string
	// Method and Path are the verb's HTTP route under the bearer token
	// ("" when the verb is served over the socket only). {tree} in the
	// path is tree_id, {node} node_id, or source_id when Source is set.
	Method, Path string
	Source       bool
	// Created: the HTTP face answers success with 201, not 200.
	Created bool
	// Body makes the HTTP request body of a request (nil: the verb takes
	// none); Body(Request{}) is an empty one to decode into.
	Body func(Request) Body
	// Flag selects this verb among those that share its method and path
	// (GET .../files/{path...}?stat=1 is file_stat); "" is the route's
	// default verb.
	Flag string
	// Query lists the request fields carried in the URL's query
	// (?mode=420&parents=1).
	Query []string
	// Raw: the HTTP body is the verb's data itself, streamed (file_write's
	// request, file_read's reply), not JSON.
	Raw bool
}

// Body is an HTTP request body: Fill copies what it holds into the request
// (the face has set the op and the path's ids).
type Body interface {
	Fill(*Request) error
}

// TreeCreateBody is the body of POST /v1/trees.
type TreeCreateBody struct {
	TreeID  string  `json:"tree_id,omitempty"`
	Base    string  `json:"base"`
	Backend string  `json:"backend,omitempty"`
	Budget  *Budget `json:"budget,omitempty"`
	Image   string  `json:"image,omitempty"`
	Network string  `json:"network,omitempty"`
}

// Fill implements Body.
func (b *TreeCreateBody) Fill(r *Request) error {
	r.TreeID, r.Base, r.Backend, r.Budget = b.TreeID, b.Base, b.Backend, b.Budget
	r.Image, r.Network = b.Image, b.Network
	return nil
}

// ForkBody is the body of POST .../nodes/{node}/fork: one label (tree_fork),
// or labels for a batch (tree_fork_batch; present, even empty, makes it one).
type ForkBody struct {
	Label  string   `json:"label,omitempty"`
	Labels []string `json:"labels,omitempty"`
}

// Fill implements Body; labels make the request a tree_fork_batch.
func (b *ForkBody) Fill(r *Request) error {
	switch {
	case b.Label != "" && b.Labels != nil:
		return Errorf(ErrBadRequest, `fork: give "label" or "labels", not both`)
	case b.Labels != nil:
		r.Op, r.Labels = OpTreeForkBatch, b.Labels
	default:
		r.Label = b.Label
	}
	return nil
}

// forkBatchBody keeps an empty list on the wire (ForkBody omits it), so
// that the daemon still sees a batch and says the list is empty.
type forkBatchBody struct {
	Labels []string `json:"labels"`
}

func (b *forkBatchBody) Fill(r *Request) error { return (&ForkBody{Labels: b.Labels}).Fill(r) }

// RollbackBody is the body of POST .../nodes/{node}/rollback.
type RollbackBody struct {
	Label string `json:"label,omitempty"`
}

// Fill implements Body.
func (b *RollbackBody) Fill(r *Request) error {
	r.Label = b.Label
	return nil
}

// ExecBody is the body of POST .../nodes/{node}/exec (tree_exec).
type ExecBody struct {
	Argv      []string `json:"argv"`
	Env       []string `json:"env,omitempty"`
	Cwd       string   `json:"cwd,omitempty"`
	TimeoutNS int64    `json:"timeout_ns,omitempty"`
	Stdin     []byte   `json:"stdin,omitempty"`
	Detach    bool     `json:"detach,omitempty"`
}

// Fill implements Body.
func (b *ExecBody) Fill(r *Request) error {
	r.Argv, r.Env, r.Cwd, r.TimeoutNS, r.Stdin, r.Detach = b.Argv, b.Env, b.Cwd, b.TimeoutNS, b.Stdin, b.Detach
	return nil
}

// MkdirBody is the body of POST .../files/{path...}?mkdir=1 (file_mkdir).
type MkdirBody struct {
	Mode    uint32 `json:"mode,omitempty"`
	Parents bool   `json:"parents,omitempty"`
}

// Fill implements Body.
func (b *MkdirBody) Fill(r *Request) error {
	r.Mode, r.Parents = b.Mode, b.Parents
	return nil
}

// ProcessBody is the body of POST .../nodes/{node}/exec/kill.
type ProcessBody struct {
	ProcessID string `json:"process_id"`
}

// Fill implements Body.
func (b *ProcessBody) Fill(r *Request) error {
	r.ProcessID = b.ProcessID
	return nil
}

// ImageBuildBody is the body of POST /v1/images (image_build).
type ImageBuildBody struct {
	Image    string   `json:"image"`
	Suite    string   `json:"suite,omitempty"`
	Variant  string   `json:"variant,omitempty"`
	Packages []string `json:"packages,omitempty"`
}

// Fill implements Body.
func (b *ImageBuildBody) Fill(r *Request) error {
	r.Image, r.Suite, r.Variant, r.Packages = b.Image, b.Suite, b.Variant, b.Packages
	return nil
}

// EventsPath is the HTTP route (GET) of the event stream of every tree, or
// of one named by ?tree= (tree_watch with no tree id).
const EventsPath = "/v1/events"

const (
	treePath = "/v1/trees/{tree}"
	nodePath = treePath + "/nodes/{node}"
	// filesPath is a node's file at {path...}: the rest of the URL path,
	// each segment escaped (a leading "/" of the request's path dropped:
	// paths in a node are the same with or without it).
	filesPath = nodePath + "/files/{path...}"
	// imagesPath is the root filesystem images; {image} is an image's name.
	imagesPath = "/v1/images"
)

var (
	fTree   = []string{"tree_id"}
	fNode   = []string{"tree_id", "node_id"}
	rNode   = []string{"tree_id", "node_id"}
	rFork   = []string{"tree_id", "node_id", "path", "latency_ns", "pause_ns", "forks", "processes", "evicted"}
	rNodes  = []string{"tree_id", "root", "nodes", "usage", "budget"}
	rBranch = []string{"tree_id", "node_id", "branch", "path"}
	fPath   = []string{"tree_id", "node_id", "path"}
	rFile   = []string{"tree_id", "node_id", "file"}
)

var verbTable = []Verb{
	{Op: OpPing, Reply: "pong", ReadOnly: true, ReplyFields: []string{"version"}, Method: "GET", Path: "/v1/version"},
	{Op: OpTreeCreate, Reply: "tree_created", Request: []string{"tree_id", "base", "backend", "budget", "image", "network"},
		ReplyFields: []string{"tree_id", "root", "node_id", "path"}, Method: "POST", Path: "/v1/trees", Created: true,
		Body: func(r Request) Body {
			return &TreeCreateBody{TreeID: r.TreeID, Base: r.Base, Backend: r.Backend, Budget: r.Budget, Image: r.Image, Network: r.Network}
		}},
	{Op: OpTreeList, Reply: "tree_list", ReadOnly: true, ReplyFields: []string{"trees"}, Method: "GET", Path: "/v1/trees"},
	{Op: OpTreeNodes, Reply: "tree_node_list", ReadOnly: true, Request: fTree, ReplyFields: rNodes, Method: "GET", Path: treePath},
	{Op: OpTreeDelete, Reply: StatusOK, Request: fTree, ReplyFields: fTree, Method: "DELETE", Path: treePath},
	{Op: OpTreeDrop, Reply: StatusOK, Request: fTree, ReplyFields: fTree, Method: "POST", Path: treePath + "/drop"},
	{Op: OpTreeOpen, Reply: "tree_opened", Request: fTree, ReplyFields: rNodes, Method: "POST", Path: treePath + "/open"},
	{Op: OpTreeAutoEvict, Reply: "tree_evicted", Request: fTree, ReplyFields: []string{"tree_id", "evicted"}, Method: "POST", Path: treePath + "/evict"},
	{Op: OpTreeWatch, Reply: StatusWatching, ReadOnly: true, Stream: true, Request: fTree,
		ReplyFields: []string{"tree_id", "root", "nodes", "trees", "usage", "budget"}, Method: "GET", Path: treePath + "/watch"},
	{Op: OpTreeFork, Reply: statusTreeForked, Request: []string{"tree_id", "source_id", "label"}, ReplyFields: rFork,
		Method: "POST", Path: nodePath + "/fork", Source: true, Created: true,
		Body: func(r Request) Body { return &ForkBody{Label: r.Label} }},
	{Op: OpTreeForkBatch, Reply: OpTreeForkBatch, Request: []string{"tree_id", "source_id", "labels"}, ReplyFields: rFork,
		Method: "POST", Path: nodePath + "/fork", Source: true, Created: true,
		Body: func(r Request) Body {
			if r.Labels == nil {
				return &forkBatchBody{Labels: []string{}}
			}
			return &forkBatchBody{Labels: r.Labels}
		}},
	{Op: OpTreeRollback, Reply: statusTreeForked, Request: []string{"tree_id", "node_id", "label"}, ReplyFields: rFork,
		Method: "POST", Path: nodePath + "/rollback", Created: true,
		Body: func(r Request) Body { return &RollbackBody{Label: r.Label} }},
	{Op: OpTreeCommit, Reply: "tree_committed", Request: fNode, ReplyFields: []string{"tree_id", "node_id", "path", "stale"}, Method: "POST", Path: nodePath + "/commit"},
	{Op: OpTreeAbort, Reply: StatusOK, Request: fNode, ReplyFields: rNode, Method: "DELETE", Path: nodePath},
	{Op: OpTreePrune, Reply: StatusOK, Request: fNode, ReplyFields: rNode, Method: "POST", Path: nodePath + "/prune"},
	{Op: OpTreeProtect, Reply: StatusOK, Request: fNode, ReplyFields: rNode, Method: "POST", Path: nodePath + "/protect"},
	{Op: OpTreeUnprotect, Reply: StatusOK, Request: fNode, ReplyFields: rNode, Method: "POST", Path: nodePath + "/unprotect"},
	{Op: OpTreeSuspend, Reply: StatusOK, Request: fNode, ReplyFields: []string{"tree_id", "node_id", "evicted"}, Method: "POST", Path: nodePath + "/suspend"},
	{Op: OpTreeResume, Reply: "tree_resumed", Request: fNode, ReplyFields: []string{"tree_id", "node_id", "path", "evicted"}, Method: "POST", Path: nodePath + "/resume"},
	{Op: OpTreeDiff, Reply: OpTreeDiff, ReadOnly: true, Request: fNode, ReplyFields: []string{"tree_id", "node_id", "changes"}, Method: "GET", Path: nodePath + "/diff"},
	{Op: OpTreeRebase, Reply: "tree_rebased", Request: []string{"tree_id", "node_id", "label"}, ReplyFields: []string{"tree_id", "node_id", "path", "conflicts"},
		Method: "POST", Path: nodePath + "/rebase", Created: true, Body: func(r Request) Body { return &RollbackBody{Label: r.Label} }},
	{Op: OpShutdown, Reply: "shutting_down"},
	{Op: OpTreeExec, Reply: StatusExecExit, Stream: true,
		Request:     []string{"tree_id", "node_id", "argv", "env", "cwd", "timeout_ns", "stdin", "input", "tty", "rows", "cols", "detach"},
		ReplyFields: []string{"tree_id", "node_id", "output", "exit", "process_id"}, Method: "POST", Path: nodePath + "/exec",
		Body: func(r Request) Body {
			return &ExecBody{Argv: r.Argv, Env: r.Env, Cwd: r.Cwd, TimeoutNS: r.TimeoutNS, Stdin: r.Stdin, Detach: r.Detach}
		}},
	{Op: OpImageBuild, Reply: "image_built", Stream: true, Request: []string{"image", "suite", "variant", "packages"},
		ReplyFields: []string{"image", "cached", "progress"}, Method: "POST", Path: imagesPath,
		Body: func(r Request) Body {
			return &ImageBuildBody{Image: r.Image, Suite: r.Suite, Variant: r.Variant, Packages: r.Packages}
		}},
	{Op: OpImageList, Reply: "image_list", ReadOnly: true, ReplyFields: []string{"images"}, Method: "GET", Path: imagesPath},
	{Op: OpImageRm, Reply: StatusOK, Request: []string{"image"}, ReplyFields: []string{"image"}, Method: "DELETE", Path: imagesPath + "/{image}"},
	{Op: OpWsMount, Reply: "ws_mounted", Request: []string{"base", "mountpoint", "branch", "budget", "durable", "quota_bytes", "hide_control"},
		ReplyFields: []string{"tree_id", "node_id", "path", "branch", "already_mounted"}},
	{Op: OpWsUnmount, Reply: StatusOK, Request: []string{"mountpoint"}, ReplyFields: fTree},
	{Op: OpWsMounts, Reply: "ws_mounts", ReadOnly: true, ReplyFields: []string{"mounts"}},
	{Op: OpWsCreate, Reply: "ws_created", Request: []string{"mountpoint", "branch", "parent", "quota_bytes", "no_switch"}, ReplyFields: rBranch},
	{Op: OpWsCommit, Reply: "ws_committed", Request: []string{"mountpoint", "branch", "durable"}, ReplyFields: []string{"tree_id", "node_id", "branch", "stale"}},
	{Op: OpWsAbort, Reply: StatusOK, Request: []string{"mountpoint", "branch"}, ReplyFields: rBranch},
	{Op: OpWsSwitch, Reply: StatusOK, Request: []string{"mountpoint", "branch"}, ReplyFields: rBranch},
	{Op: OpWsList, Reply: "ws_branches", ReadOnly: true, Request: []string{"mountpoint"}, ReplyFields: []string{"tree_id", "branch", "branches"}},
	{Op: OpFileRead, Reply: OpFileRead, ReadOnly: true, Stream: true, Request: fPath, ReplyFields: []string{"tree_id", "node_id", "data_b64", "file"},
		Method: "GET", Path: filesPath, Raw: true},
	{Op: OpFileStat, Reply: OpFileStat, ReadOnly: true, Request: fPath, ReplyFields: rFile, Method: "GET", Path: filesPath, Flag: "stat"},
	{Op: OpFileList, Reply: OpFileList, ReadOnly: true, Request: fPath, ReplyFields: []string{"tree_id", "node_id", "file", "entries"},
		Method: "GET", Path: filesPath, Flag: "list"},
	{Op: OpFileWrite, Reply: "file_written", Request: []string{"tree_id", "node_id", "path", "data_b64", "mode", "input"}, ReplyFields: rFile,
		Method: "PUT", Path: filesPath, Query: []string{"mode"}, Raw: true},
	{Op: OpFileRemove, Reply: StatusOK, Request: []string{"tree_id", "node_id", "path", "recursive"}, ReplyFields: []string{"tree_id", "node_id"},
		Method: "DELETE", Path: filesPath, Query: []string{"recursive"}},
	{Op: OpFileMkdir, Reply: "dir_made", Request: []string{"tree_id", "node_id", "path", "mode", "parents"}, ReplyFields: rFile,
		Method: "POST", Path: filesPath, Flag: "mkdir", Created: true,
		Body: func(r Request) Body { return &MkdirBody{Mode: r.Mode, Parents: r.Parents} }},
	{Op: OpExecList, Reply: OpExecList, ReadOnly: true, Request: fNode, ReplyFields: []string{"tree_id", "node_id", "process_list"},
		Method: "GET", Path: nodePath + "/exec"},
	{Op: OpExecKill, Reply: StatusOK, Request: []string{"tree_id", "node_id", "process_id"}, ReplyFields: []string{"tree_id", "node_id", "process_id"},
		Method: "POST", Path: nodePath + "/exec/kill", Body: func(r Request) Body { return &ProcessBody{ProcessID: r.ProcessID} }},
	{Op: OpExecLogs, Reply: OpExecLogs, ReadOnly: true, Stream: true, Request: []string{"tree_id", "node_id", "process_id", "follow"},
		ReplyFields: []string{"tree_id", "node_id", "process_id", "output", "exit"}, Method: "GET", Path: nodePath + "/exec/logs", Query: []string{"process_id", "follow"}},
	{Op: OpWsDiff, Reply: "ws_diff", ReadOnly: true, Request: []string{"mountpoint", "branch"}, ReplyFields: []string{"tree_id", "node_id", "branch", "changes"}},
}

// verbIndex finds a row by op.
var verbIndex = func() map[string]int {
	m := make(map[string]int, len(verbTable))
	for i, v := range verbTable {
		m[v.Op] = i
	}
	return m
}()

// Verbs returns the verb table, in its order.
func Verbs() []Verb {
	out := make([]Verb, len(verbTable))
	copy(out, verbTable)
	return out
}

// Lookup returns the row of op, and false for an op no face serves.
func Lookup(op string) (Verb, bool) {
	i, ok := verbIndex[op]
	if !ok {
		return Verb{}, false
	}
	return verbTable[i], true
}

// HTTPPath is the verb's HTTP path for req, its ids (and an image's name)
// path-escaped by esc (url.PathEscape). It fails wrapping ErrBadRequest if the route needs an
// id the request lacks, or if the verb has no HTTP route.
func (v Verb) HTTPPath(req Request, esc func(string) string) (string, error) {
	if v.Path == "" {
		return "", Errorf(ErrBadRequest, "op %q has no HTTP resource", v.Op)
	}
	node, nodeField := req.NodeID, "node_id"
	if v.Source {
		node, nodeField = req.SourceID, "source_id"
	}
	p := v.Path
	if strings.Contains(p, "{tree}") {
		if req.TreeID == "" {
			return "", Errorf(ErrBadRequest, "%s: tree_id is required", v.Op)
		}
		p = strings.ReplaceAll(p, "{tree}", esc(req.TreeID))
	}
	if strings.Contains(p, "{node}") {
		if node == "" {
			return "", Errorf(ErrBadRequest, "%s: %s is required", v.Op, nodeField)
		}
		p = strings.ReplaceAll(p, "{node}", esc(node))
	}
	if strings.Contains(p, "{image}") {
		if req.Image == "" {
			return "", Errorf(ErrBadRequest, "%s: image is required", v.Op)
		}
		p = strings.ReplaceAll(p, "{image}", esc(req.Image))
	}
	if strings.Contains(p, "{path...}") {
		var segs []string
		for _, s := range strings.Split(req.Path, "/") {
			if s != "" { // "a//b" is "a/b" in a node, as on the socket
				segs = append(segs, EscapeSegment(s, esc))
			}
		}
		p = strings.ReplaceAll(p, "{path...}", strings.Join(segs, "/"))
	}
	q := url.Values{}
	if v.Flag != "" {
		q.Set(v.Flag, "1")
	}
	for _, f := range v.Query {
		if s := queryValue(req, f); s != "" {
			q.Set(f, s)
		}
	}
	if len(q) > 0 {
		p += "?" + q.Encode()
	}
	return p, nil
}

// EscapeSegment is segment s of a files path escaped by esc, "." and ".."
// as %2E and %2E%2E: a router cleans the literal ones away (with a
// redirect, or out of the files route), the escaped ones reach the node,
// which resolves them inside itself as the socket face does.
func EscapeSegment(s string, esc func(string) string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return esc(s)
}

// queryValue is request field f as the URL's query carries it ("" when
// it is the zero value).
func queryValue(req Request, f string) string {
	switch f {
	case "mode":
		if req.Mode != 0 {
			return "0" + strconv.FormatUint(uint64(req.Mode), 8)
		}
	case "recursive", "parents", "follow":
		if map[string]bool{"recursive": req.Recursive, "parents": req.Parents, "follow": req.Follow}[f] {
			return "1"
		}
	case "process_id":
		return req.ProcessID
	}
	return ""
}

// FromQuery sets the request fields the verb carries in the URL's query
// (Verb.Query). A value that does not parse fails wrapping ErrBadRequest.
func (v Verb) FromQuery(req *Request, q url.Values) error {
	for _, f := range v.Query {
		s := q.Get(f)
		if s == "" {
			continue
		}
		switch f {
		case "mode":
			m, err := strconv.ParseUint(s, 0, 32)
			if err != nil || m > 0o7777 {
				return Errorf(ErrBadRequest, "%s: mode %q is not a permission mode (0644, 0755, ...)", v.Op, s)
			}
			req.Mode = uint32(m)
		case "recursive", "parents", "follow":
			b, err := strconv.ParseBool(s)
			if err != nil {
				return Errorf(ErrBadRequest, "%s: %s=%q is not a boolean", v.Op, f, s)
			}
			switch f {
			case "recursive":
				req.Recursive = b
			case "parents":
				req.Parents = b
			default:
				req.Follow = b
			}
		case "process_id":
			req.ProcessID = s
		}
	}
	return nil
}

// FromPath sets the request's ids from an HTTP route's path values (value
// returns the one named "tree", "node", "path" or "image").
func (v Verb) FromPath(req *Request, value func(string) string) {
	req.Op = v.Op
	if strings.Contains(v.Path, "{tree}") {
		req.TreeID = value("tree")
	}
	if strings.Contains(v.Path, "{node}") {
		if v.Source {
			req.SourceID = value("node")
		} else {
			req.NodeID = value("node")
		}
	}
	if strings.Contains(v.Path, "{path...}") {
		req.Path = value("path")
	}
	if strings.Contains(v.Path, "{image}") {
		req.Image = value("image")
	}
}

// String names the verb and its route.
func (v Verb) String() string {
	if v.Path == "" {
		return v.Op
	}
	return fmt.Sprintf("%s (%s %s)", v.Op, v.Method, v.Path)
}
