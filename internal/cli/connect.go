package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/workspace"
)

// SocketPath is the daemon's socket under home.
func SocketPath(home string) string { return filepath.Join(home, "arbord.sock") }

// socket is where the daemon of the home listens: the socket of its
// configuration file (HOME/arbord.toml) if that names one, else
// SocketPath. A broken file is reported here, before a daemon is started
// that would refuse it.
func (e *env) socket() (string, error) {
	fc, err := readDaemonFile(filepath.Join(e.home, "arbord.toml"), false)
	if err != nil {
		return "", err
	}
	if fc.Socket != "" {
		return fc.Socket, nil
	}
	return SocketPath(e.home), nil
}

// socketOrDefault is socket for the commands that only look (version,
// completion, daemon stop): a broken file falls back to SocketPath.
func (e *env) socketOrDefault() string {
	if s, err := e.socket(); err == nil {
		return s
	}
	return SocketPath(e.home)
}

func logPath(home string) string { return filepath.Join(home, "arbord.log") }

// connect returns a client of a running daemon, starting one in the
// background if none answers.
func (e *env) connect() (*client.Client, error) {
	sock, err := e.socket()
	if err != nil {
		return nil, err
	}
	cl := client.New(sock)
	_, err = cl.Ping(e.ctx)
	if err == nil {
		return cl, nil
	}
	if ae := (*api.Error)(nil); errors.As(err, &ae) {
		// A daemon answered, with a refusal (a connection limit): say so,
		// do not start another.
		return nil, err
	}
	if err := e.startDaemon(); err != nil {
		return nil, err
	}
	return e.waitDaemon(cl, sock)
}

// connectFor is connect for a command on the existing mount mp: with no
// daemon running it starts one only if the home remembers mp (the daemon
// re-establishes its mounts when it starts); any other daemon would only
// answer that mp is not its mount, and stay behind.
func (e *env) connectFor(mp string) (*client.Client, error) {
	sock, err := e.socket()
	if err != nil {
		return nil, err
	}
	cl := client.New(sock)
	if _, err := cl.Ping(e.ctx); err == nil {
		return cl, nil
	} else if ae := (*api.Error)(nil); errors.As(err, &ae) {
		return nil, err // a daemon answered, with a refusal: start no other
	}
	known, err := engine.RememberedViews(e.home)
	if err != nil {
		return nil, err
	}
	if !slices.Contains(known, filepath.Clean(mp)) {
		return nil, api.Errorf(api.ErrNotFound,
			"%s is not an arbor mount: no daemon runs for home %s, and that home has no mount there (none was started; arbor mount starts one)",
			mp, e.home)
	}
	if err := e.startDaemon(); err != nil {
		return nil, err
	}
	return e.waitDaemon(cl, sock)
}

func (e *env) waitDaemon(cl *client.Client, sock string) (*client.Client, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := cl.Ping(e.ctx)
		if err == nil {
			return cl, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the daemon did not answer on %s within 15s (see %s): %w", sock, logPath(e.home), err)
		}
		select {
		case <-e.ctx.Done():
			return nil, e.ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// startDaemon starts `arbor daemon` detached: its own session, and its
// standard streams on the log file, never the caller's (a caller waiting for
// its output to close must not wait for the daemon). It reads its settings
// from HOME/arbord.toml, as a daemon started by hand does.
func (e *env) startDaemon() error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(e.home, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(logPath(e.home), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	cmd := exec.Command(exe, "daemon", "--home", e.home)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the daemon: %w", err)
	}
	return cmd.Process.Release()
}

// checkOwner refuses a command on mp when mp is an arbor mount of another
// daemon (another home): it names that daemon's home instead of letting
// this one answer "not an arbor mount". It reads /proc/self/mountinfo and
// never touches mp itself (a stat would be a request to a FUSE server that
// may hang).
func (e *env) checkOwner(mp string) error {
	home, err := filepath.Abs(e.home)
	if err != nil {
		return err
	}
	if dir, err := filepath.EvalSymlinks(filepath.Dir(mp)); err == nil {
		mp = filepath.Join(dir, filepath.Base(mp))
	}
	m, ok := fusemount.Find(mp)
	if !ok || m.FSType != "fuse.branchfs" {
		return nil
	}
	other, base, ok := workspace.ParseSource(m.Source)
	if !ok || samePath(other, home) {
		return nil
	}
	return api.Errorf(api.ErrNotFound,
		"%s is not a mount of this daemon (home %s): it is the arbor mount of %s by the daemon with home %s (use --home %s or ARBOR_HOME=%s)",
		mp, home, base, other, other, other)
}

// samePath reports whether a and b name the same directory, symlinks
// resolved.
func samePath(a, b string) bool {
	if filepath.Clean(a) == filepath.Clean(b) {
		return true
	}
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	return err1 == nil && err2 == nil && ra == rb
}
