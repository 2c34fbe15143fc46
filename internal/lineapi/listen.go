package lineapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/arbor-dev/arbor/api"
)

// maxSocketPath is the room in sockaddr_un.sun_path, less the NUL.
const maxSocketPath = 107

// Listen creates the Unix socket at path. With allowUIDs nil the socket has
// mode 0600; otherwise mode 0666, and Accept admits only peers whose uid
// (SO_PEERCRED) is root, the daemon's own, or in allowUIDs. An existing
// socket file is replaced only if nothing answers on it. Closing the
// listener removes the socket file.
func Listen(path string, allowUIDs []int) (net.Listener, error) {
	if path == "" {
		return nil, api.Errorf(api.ErrBadRequest, "lineapi: empty socket path")
	}
	if len(path) > maxSocketPath {
		return nil, api.Errorf(api.ErrBadRequest, "lineapi: socket path %q is %d bytes, over the %d the kernel allows", path, len(path), maxSocketPath)
	}
	if err := clearStale(path); err != nil {
		return nil, err
	}
	mode := os.FileMode(0o600)
	var allow []uint32
	if allowUIDs != nil {
		mode = 0o666
		allow = []uint32{0, uint32(os.Geteuid())}
		for _, u := range allowUIDs {
			if u < 0 || u > 1<<32-2 {
				return nil, api.Errorf(api.ErrBadRequest, "lineapi: uid %d out of range", u)
			}
			allow = append(allow, uint32(u))
		}
	}
	// Bind in a private directory, set the mode, then link into place: the
	// socket is never reachable at path with a wider mode, and link (unlike
	// rename) does not replace a socket another daemon made meanwhile.
	dir, err := os.MkdirTemp(filepath.Dir(path), ".arbord")
	if err != nil {
		return nil, fmt.Errorf("lineapi: socket directory: %w", err)
	}
	defer os.RemoveAll(dir)
	tmp := filepath.Join(dir, "s")
	if len(tmp) > maxSocketPath {
		// The private directory made the name too long; bind where asked.
		tmp = ""
	}
	ul, err := bindAt(tmp, path, mode)
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		ul.Close()
		return nil, fmt.Errorf("lineapi: %w", err)
	}
	return &listener{UnixListener: ul, path: path, ino: st.Ino, dev: uint64(st.Dev), allow: allow}, nil
}

func bindAt(tmp, path string, mode os.FileMode) (*net.UnixListener, error) {
	if tmp == "" {
		// Fallback: bind at path and narrow the mode right after. The
		// window is as wide as one chmod; the directory should be private.
		ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			return nil, fmt.Errorf("lineapi: listen %s: %w", path, err)
		}
		ul.SetUnlinkOnClose(false)
		if err := os.Chmod(path, mode); err != nil {
			ul.Close()
			os.Remove(path)
			return nil, fmt.Errorf("lineapi: %w", err)
		}
		return ul, nil
	}
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("lineapi: listen %s: %w", path, err)
	}
	ul.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, mode); err != nil {
		ul.Close()
		return nil, fmt.Errorf("lineapi: %w", err)
	}
	if err := os.Link(tmp, path); err != nil {
		ul.Close()
		if errors.Is(err, os.ErrExist) {
			return nil, api.Errorf(api.ErrBusy, "lineapi: %s appeared while binding (another daemon?)", path)
		}
		return nil, fmt.Errorf("lineapi: %w", err)
	}
	return ul, nil
}

// clearStale removes a socket at path that nothing answers on.
func clearStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lineapi: %w", err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return api.Errorf(api.ErrExists, "lineapi: %s exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return api.Errorf(api.ErrBusy, "lineapi: a daemon already answers on %s", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("lineapi: probing %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("lineapi: removing stale socket: %w", err)
	}
	return nil
}

// listener filters peers by uid and removes its socket file on Close.
type listener struct {
	*net.UnixListener
	path     string
	ino, dev uint64
	allow    []uint32 // nil: no check (mode 0600 already limits peers)
}

// Accept returns the next admitted connection; refused peers are answered
// with an unauthorized error line and closed without returning.
func (l *listener) Accept() (net.Conn, error) {
	for {
		c, err := l.UnixListener.AcceptUnix()
		if err != nil {
			return nil, err
		}
		if l.allow == nil {
			return c, nil
		}
		uid, err := PeerUID(c)
		if err == nil && slices.Contains(l.allow, uid) {
			return c, nil
		}
		msg := fmt.Sprintf("uid %d is not allowed on this socket", uid)
		if err != nil {
			msg = fmt.Sprintf("peer credentials unavailable: %v", err)
		}
		b, _ := json.Marshal(api.Response{Status: api.StatusError, Code: api.CodeAuth, Message: msg})
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		c.Write(append(b, '\n'))
		c.Close()
	}
}

// Close stops listening and removes the socket file if it is still ours.
func (l *listener) Close() error {
	err := l.UnixListener.Close()
	var st syscall.Stat_t
	if syscall.Stat(l.path, &st) == nil && st.Ino == l.ino && uint64(st.Dev) == l.dev {
		os.Remove(l.path)
	}
	return err
}

// PeerUID returns the uid of the process at the other end of c
// (SO_PEERCRED: the peer's credentials when it connected).
func PeerUID(c *net.UnixConn) (uint32, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, cerr
	}
	return cred.Uid, nil
}
