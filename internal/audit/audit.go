// Package audit is the daemon's audit log: one JSON line per request, from
// every face (HTTP and the JSON-lines socket), through one writer.
package audit

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Faces, as Entry.Face names them.
const (
	FaceHTTP = "http"
	FaceLine = "line"
	// FaceCtl: a verb a view's control file asked for (a write or an
	// ioctl on .branchfs_ctl); UID is the caller's, Path the mountpoint.
	FaceCtl = "ctl"
)

// Entry is one audit line. Fields a face does not know are left empty.
type Entry struct {
	Time   string  `json:"time"` // RFC 3339, UTC; set by Write if empty
	Face   string  `json:"face"`
	Remote string  `json:"remote,omitempty"` // HTTP: the client's address
	UID    *uint32 `json:"uid,omitempty"`    // socket: the peer's uid (SO_PEERCRED)
	Method string  `json:"method,omitempty"` // HTTP
	Path   string  `json:"path,omitempty"`   // HTTP
	Status int     `json:"status,omitempty"` // HTTP status
	// Code is the wire code of a failed request ("" when it succeeded).
	Code       string `json:"code,omitempty"`
	DurationUS int64  `json:"duration_us"`
	Op         string `json:"op,omitempty"`
	Tree       string `json:"tree,omitempty"`
	Node       string `json:"node,omitempty"`
	// File is the path in the node a files verb named (socket; HTTP's is
	// in Path).
	File      string `json:"file,omitempty"`
	UserAgent string `json:"ua,omitempty"`
}

// Log writes entries to one writer. A nil *Log writes nothing. It is safe
// for concurrent use: lines never interleave.
type Log struct {
	w   io.Writer
	log *slog.Logger

	mu sync.Mutex // serialises lines; guards ok
	ok bool       // false after a write failure was logged
}

// New returns a Log writing to w (nil w: a nil Log, which keeps nothing).
// A write failure is logged to logger once, until a write succeeds again.
func New(w io.Writer, logger *slog.Logger) *Log {
	if w == nil {
		return nil
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Log{w: w, log: logger, ok: true}
}

// Open opens (creating with mode 0600) an append-only audit log file.
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	return f, nil
}

// Write appends one entry.
func (l *Log) Write(e Entry) {
	if l == nil {
		return
	}
	if e.Time == "" {
		e.Time = time.Now().UTC().Format(time.RFC3339Nano)
	}
	b, _ := json.Marshal(e)
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.w.Write(b); err != nil && l.ok {
		l.ok = false // log the first failure only, not one per request
		l.log.Error("audit log write failed; later failures are not logged", "err", err)
	} else if err == nil {
		l.ok = true
	}
}
