package mcpserver

import (
	"context"
	"io/fs"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbor-dev/arbor/api"
)

// Sandbox serves exec and the files tools on a node: the verbs the
// backend seam (issue 10) and the process sandbox (issue 11) add to the
// engine, as these tools will call them. Config.Sandbox is nil until they
// land, and those tools answer not_supported. Errors wrap api sentinels,
// like Handler's (a dir-backend tree's exec answers not_supported too).
type Sandbox interface {
	// Exec runs argv in the node's sandbox and collects its output, each
	// stream bounded to its last MaxOutputBytes.
	Exec(ctx context.Context, treeID, nodeID string, req ExecIn) (ExecOut, error)
	// ReadFile reads at most maxBytes of a file of the node (path relative
	// to the node's root, resolved inside it).
	ReadFile(ctx context.Context, treeID, nodeID, path string, maxBytes int64) (ReadFileOut, error)
	// WriteFile replaces a file of the node atomically.
	WriteFile(ctx context.Context, treeID, nodeID, path string, data []byte, mode fs.FileMode) error
	// ListFiles lists a directory of the node.
	ListFiles(ctx context.Context, treeID, nodeID, dir string) ([]FileEntry, error)
}

// Bounds of exec and read_file.
const (
	DefaultExecTimeout    = 30 * time.Second
	MaxExecTimeout        = 10 * time.Minute
	DefaultMaxOutputBytes = 1 << 20
	MaxOutputBytes        = 16 << 20
	DefaultMaxReadBytes   = 1 << 20
	MaxReadBytes          = 16 << 20
)

// ExecIn is exec's input.
type ExecIn struct {
	NodeIn
	Argv           []string          `json:"argv" jsonschema:"the program and its arguments, e.g. [\"go\", \"test\", \"./...\"]; no shell unless you name one"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory inside the node (default /workspace)"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"environment variables to add"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text given on standard input"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"kill the process after this many seconds (default 30, at most 600)"`
	MaxOutputBytes int64             `json:"max_output_bytes,omitempty" jsonschema:"keep at most the last this many bytes of each of stdout and stderr (default 1 MiB, at most 16 MiB)"`
}

// ExecOut is exec's output: the collected form of the exec verb.
type ExecOut struct {
	Stdout     string `json:"stdout"`
	Stderr     string `json:"stderr"`
	ExitCode   int    `json:"exit_code" jsonschema:"the exit status; -1 when killed by a signal"`
	Signal     string `json:"signal,omitempty" jsonschema:"the signal that ended the process (KILL on timeout)"`
	DurationNS int64  `json:"duration_ns"`
	Truncated  bool   `json:"truncated,omitempty" jsonschema:"true if output was cut to max_output_bytes (the end is kept)"`
}

// FileIn names a file of a node.
type FileIn struct {
	NodeIn
	Path     string `json:"path" jsonschema:"path relative to the node's root; symlinks resolve inside the node"`
	MaxBytes int64  `json:"max_bytes,omitempty" jsonschema:"read at most this many bytes (default 1 MiB, at most 16 MiB)"`
}

// ReadFileOut is read_file's output.
type ReadFileOut struct {
	Content   string `json:"content" jsonschema:"the file's bytes as text"`
	Size      int64  `json:"size" jsonschema:"the file's whole size in bytes"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"true if only the first max_bytes were read"`
}

// WriteFileIn is write_file's input.
type WriteFileIn struct {
	NodeIn
	Path    string `json:"path" jsonschema:"path relative to the node's root; missing parent directories are made"`
	Content string `json:"content" jsonschema:"the file's new content"`
	Mode    uint32 `json:"mode,omitempty" jsonschema:"permission bits, e.g. 420 for 0644 (default 0644)"`
}

// WriteFileOut is write_file's output.
type WriteFileOut struct {
	Bytes int `json:"bytes" jsonschema:"bytes written"`
}

// FileEntry is one entry of list_files.
type FileEntry struct {
	Name string `json:"name"`
	Kind string `json:"kind" jsonschema:"file, dir, symlink or other"`
	Size int64  `json:"size"`
	Mode uint32 `json:"mode"`
}

// ListFilesOut is list_files' output.
type ListFilesOut struct {
	Entries []FileEntry `json:"entries"`
}

func (s *Server) addSandboxTools(ro, mutating *mcp.ToolAnnotations) {
	tool(s, &mcp.Tool{Name: "exec", Annotations: mutating,
		Description: "Run a command in a live node's sandbox and return its exit code and output (the last max_output_bytes of each stream). Needs a tree with a sandbox backend; a dir-backend tree answers not_supported (use the node's path on the host instead)."},
		func(ctx context.Context, in ExecIn) (ExecOut, error) {
			if s.cfg.Sandbox == nil {
				return ExecOut{}, notSupported("exec")
			}
			if len(in.Argv) == 0 || in.Argv[0] == "" {
				return ExecOut{}, api.Errorf(api.ErrBadRequest, "exec: argv must name a program")
			}
			if in.TimeoutSeconds < 0 || in.MaxOutputBytes < 0 {
				return ExecOut{}, api.Errorf(api.ErrBadRequest, "exec: negative timeout_seconds or max_output_bytes")
			}
			in.TimeoutSeconds = int(bound(time.Duration(in.TimeoutSeconds)*time.Second, DefaultExecTimeout, MaxExecTimeout) / time.Second)
			in.MaxOutputBytes = bound(in.MaxOutputBytes, DefaultMaxOutputBytes, MaxOutputBytes)
			ctx, cancel := context.WithTimeout(ctx, time.Duration(in.TimeoutSeconds)*time.Second+5*time.Second)
			defer cancel()
			return s.cfg.Sandbox.Exec(ctx, in.TreeID, in.NodeID, in)
		})
	tool(s, &mcp.Tool{Name: "read_file", Annotations: ro,
		Description: "Read a file of a node as text (at most max_bytes)."},
		func(ctx context.Context, in FileIn) (ReadFileOut, error) {
			if s.cfg.Sandbox == nil {
				return ReadFileOut{}, notSupported("read_file")
			}
			if in.MaxBytes < 0 {
				return ReadFileOut{}, api.Errorf(api.ErrBadRequest, "read_file: negative max_bytes")
			}
			return s.cfg.Sandbox.ReadFile(ctx, in.TreeID, in.NodeID, in.Path, bound(in.MaxBytes, DefaultMaxReadBytes, MaxReadBytes))
		})
	tool(s, &mcp.Tool{Name: "write_file", Annotations: mutating,
		Description: "Write a file of a live node (replaced atomically)."},
		func(ctx context.Context, in WriteFileIn) (WriteFileOut, error) {
			if s.cfg.Sandbox == nil {
				return WriteFileOut{}, notSupported("write_file")
			}
			mode := fs.FileMode(in.Mode)
			if mode == 0 {
				mode = 0o644
			}
			if mode&^fs.ModePerm != 0 {
				return WriteFileOut{}, api.Errorf(api.ErrBadRequest, "write_file: mode %#o has bits beyond permissions", in.Mode)
			}
			err := s.cfg.Sandbox.WriteFile(ctx, in.TreeID, in.NodeID, in.Path, []byte(in.Content), mode)
			return WriteFileOut{Bytes: len(in.Content)}, err
		})
	tool(s, &mcp.Tool{Name: "list_files", Annotations: ro,
		Description: "List a directory of a node (path relative to the node's root; empty for the root)."},
		func(ctx context.Context, in FileIn) (ListFilesOut, error) {
			if s.cfg.Sandbox == nil {
				return ListFilesOut{}, notSupported("list_files")
			}
			es, err := s.cfg.Sandbox.ListFiles(ctx, in.TreeID, in.NodeID, in.Path)
			return ListFilesOut{Entries: nonNil(es)}, err
		})
}

// bound gives v its default when zero and caps it at most.
func bound[T int64 | time.Duration](v, def, most T) T {
	if v == 0 {
		return def
	}
	return min(v, most)
}
