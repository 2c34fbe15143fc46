package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
)

// SocketPath is the daemon's socket under home.
func SocketPath(home string) string { return filepath.Join(home, "arbord.sock") }

// connect returns a client of a running daemon, starting one in the
// background if none answers.
func (e *env) connect() (*client.Client, error) {
	sock := SocketPath(e.home)
	cl := client.New(sock)
	_, err := cl.Ping(e.ctx)
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

func logPath(home string) string { return filepath.Join(home, "arbord.log") }

// startDaemon starts `arbor daemon` detached: its own session, and its
// standard streams on the log file, never the caller's (a caller waiting for
// its output to close must not wait for the daemon).
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
