// Package wire is the framed protocol between the host and the guest agent
// of a microVM (internal/vm and internal/vm/guest), over one virtio-serial
// port: a byte stream, so every message is a frame:
//
//	"ARB1" | length (uint32, big-endian) | length bytes of JSON (one Msg)
//
// A frame over MaxFrame, a bad magic or JSON that is no Msg is
// ErrMalformed: the reader stops there (the stream has lost its framing),
// it never waits for bytes a bad length promised. The guest resynchronises
// on the host's next hello (Scan); the host treats the connection as
// broken.
//
// Requests carry an ID chosen by the host; replies and output carry the
// ID of their request. A hello starts a session: after a fork or restore
// the guest's agent is the source's, mid-stream perhaps, and the hello is
// the point from which both sides agree again.
package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Magic starts every frame.
const Magic = "ARB1"

// MaxFrame bounds a frame's JSON: an output chunk (ChunkSize of data,
// base64 in JSON) or a file call's data is the biggest.
const MaxFrame = 4 << 20

// ChunkSize is the most data one output, stdin or file frame carries.
const ChunkSize = 64 << 10

// MaxFile bounds a file call's data (one frame).
const MaxFile = 2 << 20

// ErrMalformed is a frame that breaks the protocol.
var ErrMalformed = errors.New("malformed agent frame")

// Ops.
const (
	OpHello = "hello" // host -> guest: a new session (Session, Hostname, Seed)
	OpReady = "ready" // guest -> host: the session's reply (Session)
	OpPing  = "ping"  // host -> guest
	OpPong  = "pong"  // guest -> host
	OpExec  = "exec"  // host -> guest: start Argv (Env, Cwd, TimeoutMS); replies: out..., exit
	OpStdin = "stdin" // host -> guest: Data for ID's stdin; EOF closes it
	OpKill  = "kill"  // host -> guest: SIGKILL ID's process group
	OpOut   = "out"   // guest -> host: Data on Stream ("stdout", "stderr") of ID
	OpExit  = "exit"  // guest -> host: ID ended: Code, or Signal; Err if it never started
	OpRead  = "read"  // host -> guest: read file Path; reply: file
	OpWrite = "write" // host -> guest: write Data to Path (Mode); reply: done
	OpFile  = "file"  // guest -> host: Data of Path (Mode), or Err
	OpDone  = "done"  // guest -> host: a call without data succeeded, or Err
	OpFS    = "fs"    // guest -> host: a file call on the node's files (FS, Path...); reply: fsr
	OpFSR   = "fsr"   // host -> guest: the file call's reply (Errno, Stat, Ents, Data)
)

// Msg is every message; each op uses the fields it names.
type Msg struct {
	Op  string `json:"op"`
	ID  uint64 `json:"id,omitempty"`
	Err string `json:"err,omitempty"`

	// hello, ready
	Session  string `json:"session,omitempty"`
	Hostname string `json:"hostname,omitempty"`
	Seed     []byte `json:"seed,omitempty"`

	// exec
	Argv      []string `json:"argv,omitempty"`
	Env       []string `json:"env,omitempty"`
	Cwd       string   `json:"cwd,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`

	// out, stdin, read, write, file
	Stream string `json:"stream,omitempty"`
	Data   []byte `json:"data,omitempty"`
	EOF    bool   `json:"eof,omitempty"`
	Path   string `json:"path,omitempty"`
	Mode   uint32 `json:"mode,omitempty"`

	// exit
	Code   int    `json:"code,omitempty"`
	Signal string `json:"signal,omitempty"`

	// fs, fsr: a file call on the node's files, Path relative to their
	// top ("" is the top).
	FS    string   `json:"fs,omitempty"`
	Path2 string   `json:"path2,omitempty"` // rename's target, symlink's target
	Off   int64    `json:"off,omitempty"`
	Size  int64    `json:"size,omitempty"`
	Flags uint32   `json:"flags,omitempty"` // setattr: which of Mode, Size, times; create: O_EXCL
	Errno int      `json:"errno,omitempty"`
	Stat  *Stat    `json:"stat,omitempty"`
	Ents  []Dirent `json:"ents,omitempty"`
	Atime int64    `json:"atime,omitempty"`
	Mtime int64    `json:"mtime,omitempty"`
}

// File calls (Msg.FS).
const (
	FSStat     = "stat"     // Path -> Stat (lstat)
	FSReaddir  = "readdir"  // Path -> Ents
	FSRead     = "read"     // Path, Off, Size -> Data
	FSWrite    = "write"    // Path, Off, Data -> Size written
	FSCreate   = "create"   // Path, Mode, Flags (SetExcl) -> Stat
	FSMkdir    = "mkdir"    // Path, Mode -> Stat
	FSRemove   = "remove"   // Path (a file or an empty directory)
	FSRename   = "rename"   // Path -> Path2
	FSSetattr  = "setattr"  // Path, Flags (SetMode, SetSize, SetTimes), Mode, Size, Atime, Mtime -> Stat
	FSReadlink = "readlink" // Path -> Path2
	FSSymlink  = "symlink"  // Path (the link), Path2 (its target) -> Stat
)

// Setattr's and create's flags.
const (
	SetMode = 1 << iota
	SetSize
	SetTimes
	SetExcl
)

// Stat is a file's attributes.
type Stat struct {
	Mode  uint32 `json:"mode"` // st_mode: type and permissions
	Size  int64  `json:"size"`
	Ino   uint64 `json:"ino"`
	Nlink uint32 `json:"nlink"`
	Uid   uint32 `json:"uid"`
	Gid   uint32 `json:"gid"`
	Atime int64  `json:"atime"` // ns
	Mtime int64  `json:"mtime"`
	Ctime int64  `json:"ctime"`
}

// Dirent is one directory entry.
type Dirent struct {
	Name string `json:"name"`
	Mode uint32 `json:"mode"` // type bits
	Ino  uint64 `json:"ino"`
}

// Encode returns m as one frame.
func Encode(m *Msg) ([]byte, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFrame {
		return nil, fmt.Errorf("%w: %s message of %d bytes is over %d", ErrMalformed, m.Op, len(b), MaxFrame)
	}
	f := make([]byte, 8, 8+len(b))
	copy(f, Magic)
	binary.BigEndian.PutUint32(f[4:], uint32(len(b)))
	return append(f, b...), nil
}

// Reader reads frames.
type Reader struct {
	r   *bufio.Reader
	buf []byte
}

// NewReader reads frames from r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 64<<10)}
}

// Read returns the next message. A frame that breaks the protocol is an
// error wrapping ErrMalformed; the stream's own errors (io.EOF) come as
// they are.
func (r *Reader) Read() (*Msg, error) {
	var h [8]byte
	if _, err := io.ReadFull(r.r, h[:]); err != nil {
		return nil, err
	}
	if string(h[:4]) != Magic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrMalformed, h[:4])
	}
	return r.body(binary.BigEndian.Uint32(h[4:]))
}

func (r *Reader) body(n uint32) (*Msg, error) {
	if n > MaxFrame {
		return nil, fmt.Errorf("%w: frame of %d bytes is over %d", ErrMalformed, n, MaxFrame)
	}
	if cap(r.buf) < int(n) {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	if _, err := io.ReadFull(r.r, b); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	m := new(Msg)
	if err := json.Unmarshal(b, m); err != nil || m.Op == "" {
		if err == nil {
			err = errors.New("no op")
		}
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return m, nil
}

// Scan skips bytes until a well-formed frame for which keep is true, and
// returns it: the resynchronisation after a fork or a broken frame. It
// gives up with ErrMalformed after limit bytes.
func (r *Reader) Scan(limit int, keep func(*Msg) bool) (*Msg, error) {
	skipped := 0
	for skipped <= limit {
		p, err := r.r.Peek(8)
		if err != nil {
			return nil, err
		}
		if !bytes.Equal(p[:4], []byte(Magic)) {
			r.r.Discard(1)
			skipped++
			continue
		}
		n := binary.BigEndian.Uint32(p[4:])
		if n > MaxFrame {
			r.r.Discard(1)
			skipped++
			continue
		}
		r.r.Discard(8)
		m, err := r.body(n)
		if errors.Is(err, ErrMalformed) {
			skipped += 8 + int(n)
			continue
		}
		if err != nil {
			return nil, err
		}
		if keep(m) {
			return m, nil
		}
		skipped += 8 + int(n)
	}
	return nil, fmt.Errorf("%w: no expected frame in %d bytes", ErrMalformed, limit)
}
