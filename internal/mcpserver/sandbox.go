package mcpserver

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbor-dev/arbor/api"
)

// Execer and FileReader are what a Handler serves besides Do for exec
// and read_file (the daemon's router does; Socket does over the socket):
// exec streams output, read_file reads a file in chunks. A Handler without
// them answers those tools not_supported. The other files tools are verbs
// through Do (file_stat, file_write, file_mkdir, file_list).
type (
	Execer interface {
		Exec(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (api.ExecExit, error)
	}
	FileReader interface {
		ReadFile(ctx context.Context, treeID, nodeID, path string, w io.Writer) (api.FileInfo, error)
	}
)

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
		Description: "Run a command in a live node's sandbox and return its exit code and output (the last max_output_bytes of each stream). Needs a tree with a sandbox backend (jail); a dir-backend tree answers not_supported (use the node's path on the host instead)."},
		func(ctx context.Context, in ExecIn) (ExecOut, error) {
			x, ok := s.cfg.Handler.(Execer)
			if !ok {
				return ExecOut{}, notSupported("exec")
			}
			if len(in.Argv) == 0 || in.Argv[0] == "" {
				return ExecOut{}, api.Errorf(api.ErrBadRequest, "exec: argv must name a program")
			}
			if in.TimeoutSeconds < 0 || in.MaxOutputBytes < 0 {
				return ExecOut{}, api.Errorf(api.ErrBadRequest, "exec: negative timeout_seconds or max_output_bytes")
			}
			cwd, err := workspaceRel(in.Cwd)
			if err != nil {
				return ExecOut{}, err
			}
			timeout := bound(time.Duration(in.TimeoutSeconds)*time.Second, DefaultExecTimeout, MaxExecTimeout)
			req := api.Request{Op: api.OpTreeExec, TreeID: in.TreeID, NodeID: in.NodeID, Argv: in.Argv, Cwd: cwd,
				TimeoutNS: int64(timeout), Stdin: []byte(in.Stdin)}
			for _, k := range slices.Sorted(maps.Keys(in.Env)) {
				req.Env = append(req.Env, k+"="+in.Env[k])
			}
			ctx, cancel := context.WithTimeout(ctx, timeout+5*time.Second)
			defer cancel()
			c := api.Collector{Max: int(bound(in.MaxOutputBytes, DefaultMaxOutputBytes, MaxOutputBytes))}
			var exit api.ExecExit
			err = s.observe(ctx, req.Op, func(ctx context.Context) (err error) {
				exit, err = x.Exec(ctx, req, func(o api.ExecOutput) error {
					c.Add(o)
					return nil
				})
				return err
			})
			if err != nil {
				return ExecOut{}, err
			}
			r := c.Result(exit)
			stdout, stderr := c.Bytes()
			return ExecOut{Stdout: string(stdout), Stderr: string(stderr), ExitCode: r.ExitCode, Signal: r.Signal, DurationNS: r.DurationNS, Truncated: r.Truncated}, nil
		})
	tool(s, &mcp.Tool{Name: "read_file", Annotations: ro,
		Description: "Read a file of a node as text (at most max_bytes from its start). A jail node's files are under /workspace (a relative path is too), its /tmp at /tmp."},
		func(ctx context.Context, in FileIn) (ReadFileOut, error) {
			fr, ok := s.cfg.Handler.(FileReader)
			if !ok {
				return ReadFileOut{}, notSupported("read_file")
			}
			if in.MaxBytes < 0 {
				return ReadFileOut{}, api.Errorf(api.ErrBadRequest, "read_file: negative max_bytes")
			}
			max := bound(in.MaxBytes, DefaultMaxReadBytes, MaxReadBytes)
			w := &capped{max: max}
			var fi api.FileInfo
			err := s.observe(ctx, api.OpFileRead, func(ctx context.Context) (err error) {
				fi, err = fr.ReadFile(ctx, in.TreeID, in.NodeID, in.Path, w)
				return err
			})
			if err != nil && !errors.Is(err, errEnough) {
				return ReadFileOut{}, err
			}
			size := fi.Size
			if w.over {
				// Cut short: the size is the file's, asked for.
				st, err := s.call(ctx, api.Request{Op: api.OpFileStat, TreeID: in.TreeID, NodeID: in.NodeID, Path: in.Path})
				if err != nil {
					return ReadFileOut{}, err
				}
				size = st.File.Size
			}
			return ReadFileOut{Content: w.b.String(), Size: size, Truncated: w.over}, nil
		})
	tool(s, &mcp.Tool{Name: "write_file", Annotations: mutating,
		Description: "Write a file of a live node (replaced atomically; missing parent directories are made)."},
		func(ctx context.Context, in WriteFileIn) (WriteFileOut, error) {
			mode := fs.FileMode(in.Mode)
			if mode == 0 {
				mode = 0o644
			}
			if mode&^fs.ModePerm != 0 {
				return WriteFileOut{}, api.Errorf(api.ErrBadRequest, "write_file: mode %#o has bits beyond permissions", in.Mode)
			}
			if dir := path.Dir(path.Clean("/" + in.Path)); dir != "/" {
				if _, err := s.call(ctx, api.Request{Op: api.OpFileMkdir, TreeID: in.TreeID, NodeID: in.NodeID, Path: dir, Parents: true}); err != nil {
					return WriteFileOut{}, err
				}
			}
			_, err := s.call(ctx, api.Request{Op: api.OpFileWrite, TreeID: in.TreeID, NodeID: in.NodeID, Path: in.Path,
				Data: []byte(in.Content), Mode: uint32(mode)})
			return WriteFileOut{Bytes: len(in.Content)}, err
		})
	tool(s, &mcp.Tool{Name: "list_files", Annotations: ro,
		Description: "List a directory of a node (empty for the top of its files)."},
		func(ctx context.Context, in FileIn) (ListFilesOut, error) {
			r, err := s.call(ctx, api.Request{Op: api.OpFileList, TreeID: in.TreeID, NodeID: in.NodeID, Path: in.Path})
			if err != nil {
				return ListFilesOut{}, err
			}
			out := ListFilesOut{Entries: []FileEntry{}}
			for _, e := range r.Entries {
				out.Entries = append(out.Entries, FileEntry{Name: e.Name, Kind: e.Type, Size: e.Size, Mode: e.Mode})
			}
			return out, nil
		})
}

// workspaceRel is exec's cwd as the verb takes it: relative to the node's
// files (/workspace in a jail).
func workspaceRel(cwd string) (string, error) {
	if cwd == "" || !path.IsAbs(cwd) {
		return cwd, nil
	}
	c := path.Clean(cwd)
	if c == "/workspace" {
		return "", nil
	}
	if rel, ok := strings.CutPrefix(c, "/workspace/"); ok {
		return rel, nil
	}
	return "", api.Errorf(api.ErrBadRequest, "exec: cwd %q is outside /workspace (the node's files)", cwd)
}

// errEnough ends a read at max_bytes.
var errEnough = errors.New("read enough")

// capped keeps the first max bytes written to it, then fails.
type capped struct {
	b    strings.Builder
	max  int64
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	room := c.max - int64(c.b.Len())
	if int64(len(p)) > room {
		c.b.Write(p[:room])
		c.over = true
		return int(room), errEnough
	}
	c.b.Write(p)
	return len(p), nil
}

// bound gives v its default when zero and caps it at most.
func bound[T int64 | time.Duration](v, def, most T) T {
	if v == 0 {
		return def
	}
	return min(v, most)
}
