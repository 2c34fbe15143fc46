package cli

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"

	"github.com/arbor-dev/arbor/internal/daemon"
	"github.com/arbor-dev/arbor/internal/fsbench"
)

// daemon runs arbord in the foreground, or stops the running one (arbor daemon stop).
func (e *env) daemon(args []string) error {
	if len(args) > 0 && args[0] == "stop" {
		return e.stopDaemon(args[1:])
	}
	fs := flag.NewFlagSet("daemon", flag.ContinueOnError)
	home := fs.String("home", e.home, "state directory ($ARBOR_HOME)")
	socket := fs.String("socket", "", "socket path (default HOME/arbord.sock)")
	allow := fs.String("allow-uid", "", "comma-separated uids admitted to the socket (makes it 0666, checked by SO_PEERCRED)")
	httpAddr := fs.String("http", "", "serve the HTTP API at this address (e.g. 127.0.0.1:7878)")
	token := fs.String("token", e.getenv("ARBOR_TOKEN"), "HTTP bearer token ($ARBOR_TOKEN); required off loopback")
	noPT := fs.Bool("no-passthrough", false, "serve file data through the daemon even as root")
	verbose := fs.Bool("v", false, "log debug messages")
	if pos, err := parse(fs, args); err != nil {
		return err
	} else if len(pos) != 0 {
		return usagef("usage: arbor daemon [--home DIR] [--socket PATH] [--allow-uid U,...] [--http ADDR] [--token T]")
	}
	var uids []int
	if *allow != "" {
		for _, s := range strings.Split(*allow, ",") {
			u, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || u < 0 {
				return usagef("--allow-uid: %q is not a uid", s)
			}
			uids = append(uids, u)
		}
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	cfg := daemon.Config{Home: *home, Socket: *socket, AllowUIDs: uids, HTTPAddr: *httpAddr, Token: *token,
		Logger: slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: level}))}
	if *noPT {
		f := false
		cfg.Passthrough = &f
	}
	return daemon.Run(e.ctx, cfg)
}

// stopDaemon asks the daemon of $ARBOR_HOME to exit and waits until it has
// (its lock on HOME/arbord.lock is free: every mount is down by then).
func (e *env) stopDaemon(args []string) error {
	fs := flag.NewFlagSet("daemon stop", flag.ContinueOnError)
	home := fs.String("home", e.home, "state directory ($ARBOR_HOME)")
	wait := fs.Duration("timeout", 30*time.Second, "how long to wait for the daemon to exit")
	if pos, err := parse(fs, args); err != nil {
		return err
	} else if len(pos) != 0 {
		return usagef("usage: arbor daemon stop [--home DIR] [--timeout D]")
	}
	cl := client.New(SocketPath(*home))
	defer cl.Close()
	if _, err := cl.Ping(e.ctx); err != nil {
		fmt.Fprintf(e.stdout, "no daemon answers on %s\n", SocketPath(*home))
		return nil
	}
	if _, err := cl.Do(e.ctx, api.Request{Op: api.OpShutdown}); err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			return err
		}
		// The connection can go down with the daemon before the reply: wait and see.
	}
	lock, err := os.OpenFile(filepath.Join(*home, "arbord.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	defer lock.Close()
	deadline := time.Now().Add(*wait)
	for syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("the daemon of %s did not exit within %s (see %s)", *home, *wait, logPath(*home))
		}
		select {
		case <-e.ctx.Done():
			return e.ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	fmt.Fprintln(e.stdout, "daemon stopped")
	return nil
}

// bench runs the benchmarks: arbor bench fs.
func (e *env) bench(args []string) error {
	if len(args) == 0 || args[0] != "fs" {
		return usagef("usage: arbor bench fs [--json] [--size BYTES] [--files N] [--rounds N] [--case C,...] [--system S,...]")
	}
	if code := fsbench.Main(e.ctx, args[1:], e.stdout, e.stderr, fsbench.ArborSystems()); code != 0 {
		return exitError(code)
	}
	return nil
}

type exitError int

func (c exitError) Error() string { return "failed (exit " + strconv.Itoa(int(c)) + ")" }
