package api

import (
	"errors"
	"fmt"
	"net/http"
	"syscall"
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
	CodeNoSpace    = "no_space"     // a quota was reached, or the disk is full (ENOSPC, EDQUOT)
	CodeLimit      = "limit"        // a daemon limit: too many connections, or one closed for idling
	CodeAuth       = "unauthorized" // no or a wrong credential (HTTP token, a uid not admitted to the socket)
	CodeForbidden  = "forbidden"    // the requester may not name that path (a mountpoint or base rule refused it)
	// CodeUnavailable: the host cannot do it (no usable /dev/fuse, no
	// fusermount3); the message says what, arbor doctor how to fix it.
	CodeUnavailable = "unavailable"
	// CodeNotSupported: the tree's backend does not do that verb (exec on
	// the dir backend); the message says which backend would.
	CodeNotSupported = "not_supported"
	CodeInternal     = "internal"
)

// Sentinel errors. Errors returned by the engine wrap one of these; the faces
// map them to codes and the client maps codes back, so errors.Is works across
// the socket.
var (
	ErrBadRequest   = errors.New("bad request")
	ErrNotFound     = errors.New("not found")
	ErrExists       = errors.New("already exists")
	ErrStale        = errors.New("stale")
	ErrBudget       = errors.New("over budget")
	ErrProtected    = errors.New("protected")
	ErrState        = errors.New("wrong state")
	ErrBusy         = errors.New("busy")
	ErrNoSpace      = errors.New("no space")
	ErrLimit        = errors.New("limit reached")
	ErrAuth         = errors.New("unauthorized")
	ErrForbidden    = errors.New("forbidden")
	ErrUnavailable  = errors.New("unavailable on this host")
	ErrNotSupported = errors.New("not supported by this backend")
	ErrInternal     = errors.New("internal error")
)

// ErrorKind is one row of the error table: a sentinel, its wire code, the
// HTTP status the HTTP face answers it with, and the errno the control file
// (.branchfs_ctl writes and ioctls) returns for it.
type ErrorKind struct {
	Code       string
	Err        error
	HTTPStatus int
	Errno      syscall.Errno
	// Causes are errnos that mean this kind when an error carries no
	// sentinel of its own (an ENOSPC from the store is no_space, not
	// internal, however it was wrapped).
	Causes []syscall.Errno
}

// errorTable is the one table of error kinds; every face derives from it.
// The order matters where an error wraps more than one: the first row that
// matches wins, so a cause found under ErrInternal (%w: %w) names the code.
var errorTable = []ErrorKind{
	{CodeBadRequest, ErrBadRequest, http.StatusBadRequest, syscall.EINVAL, nil},
	{CodeNotFound, ErrNotFound, http.StatusNotFound, syscall.ENOENT, nil},
	{CodeExists, ErrExists, http.StatusConflict, syscall.EEXIST, nil},
	{CodeStale, ErrStale, http.StatusConflict, syscall.ESTALE, nil},
	{CodeBudget, ErrBudget, http.StatusConflict, syscall.EDQUOT, nil},
	{CodeProtected, ErrProtected, http.StatusConflict, syscall.EPERM, nil},
	{CodeState, ErrState, http.StatusConflict, syscall.EBUSY, nil},
	{CodeBusy, ErrBusy, http.StatusConflict, syscall.EBUSY, nil},
	{CodeNoSpace, ErrNoSpace, http.StatusInsufficientStorage, syscall.ENOSPC, []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT}},
	{CodeLimit, ErrLimit, http.StatusServiceUnavailable, syscall.EAGAIN, nil},
	{CodeAuth, ErrAuth, http.StatusUnauthorized, syscall.EACCES, nil},
	{CodeForbidden, ErrForbidden, http.StatusForbidden, syscall.EPERM, nil},
	{CodeUnavailable, ErrUnavailable, http.StatusServiceUnavailable, syscall.EOPNOTSUPP, nil},
	{CodeNotSupported, ErrNotSupported, http.StatusNotImplemented, syscall.EOPNOTSUPP, nil},
	{CodeInternal, ErrInternal, http.StatusInternalServerError, syscall.EIO, nil},
}

// Errors returns the error table, in its order (the last row is internal).
func Errors() []ErrorKind {
	out := make([]ErrorKind, len(errorTable))
	copy(out, errorTable)
	return out
}

// Codes lists every wire code, in the error table's order.
func Codes() []string {
	out := make([]string, len(errorTable))
	for i, k := range errorTable {
		out[i] = k.Code
	}
	return out
}

// kindOfCode returns the row of a wire code.
func kindOfCode(code string) (ErrorKind, bool) {
	for _, k := range errorTable {
		if k.Code == code {
			return k, true
		}
	}
	return ErrorKind{}, false
}

// Sentinel returns the sentinel error of a wire code, and false for an
// unknown code.
func Sentinel(code string) (error, bool) {
	k, ok := kindOfCode(code)
	return k.Err, ok
}

// Kind returns the row err belongs to: the first whose sentinel or one of
// whose causes it wraps, or the internal row.
func Kind(err error) ErrorKind {
	for _, k := range errorTable {
		if errors.Is(err, k.Err) {
			return k
		}
		for _, c := range k.Causes {
			if errors.Is(err, c) {
				return k
			}
		}
	}
	return errorTable[len(errorTable)-1]
}

// Code returns the wire code for err (Kind(err).Code): CodeInternal unless
// it wraps a sentinel or a cause of the table.
func Code(err error) string { return Kind(err).Code }

// HTTPStatus is the HTTP status of a wire code (500 for an unknown one).
func HTTPStatus(code string) int {
	if k, ok := kindOfCode(code); ok {
		return k.HTTPStatus
	}
	return http.StatusInternalServerError
}

// Errno is the errno the control file answers err with: the errno err
// wraps, if any (the store's own, exact), else its kind's.
func Errno(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return Kind(err).Errno
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
