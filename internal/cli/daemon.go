package cli

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/daemon"
	"github.com/arbor-dev/arbor/internal/demo"
	"github.com/arbor-dev/arbor/internal/fsbench"
	"github.com/arbor-dev/arbor/internal/sandboxbench"
	"github.com/arbor-dev/arbor/internal/vmbench"
	"github.com/spf13/cobra"
)

// daemonCmd runs arbord in the foreground; arbor daemon stop stops it.
func (e *env) daemonCmd() *cobra.Command {
	var (
		configPath, socket, httpAddr, token, allow string
		transport                                  string
		noPT, verbose                              bool
		maxConns, maxPerUID                        int
		idle                                       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "daemon",
		Short: "Run the daemon arbord in the foreground",
		Long: `Runs arbord in the foreground until SIGINT or SIGTERM (or arbor daemon stop).
The other commands start it in the background when none answers.

Settings come from the configuration file (default $ARBOR_HOME/arbord.toml),
then from the flags, which override the file. The file is TOML; every key is
optional and an unknown key is an error:

  socket      = "/run/arbor/arbord.sock"   # default HOME/arbord.sock
  allow_uids  = [1000, 1001]               # admitted to the socket (0666, SO_PEERCRED)
  http        = "127.0.0.1:7878"           # serve the HTTP API there
  passthrough = false                      # false: no FUSE passthrough even as root
  log_level   = "debug"                    # debug, info (default), warn, error
  max_conns   = 1024                       # socket connections (default: from the fd limit)
  max_conns_per_uid = 256                  # of them, per uid (default: all, half with allow_uids)
  idle_timeout = "5m"                      # close a connection idle that long (default 2m)

A daemon started in the background reads the same file, so it keeps the
settings of the one it replaces. The HTTP token is not in the file: --token,
$ARBOR_TOKEN, or the one the daemon keeps in HOME/http.token.`,
		Example: `  arbor daemon
  arbor daemon --http 127.0.0.1:7878 -v
  arbor daemon --config /etc/arbor/arbord.toml
  arbor daemon stop`,
		Args:              subcommandArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		Version:           versionString(), // arbor daemon --version, so arbord --version
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "the configuration file (default HOME/arbord.toml; a missing default file is no error)")
	f.StringVar(&socket, "socket", "", "socket path (default HOME/arbord.sock)")
	f.StringVar(&allow, "allow-uid", "", "comma-separated uids admitted to the socket (makes it 0666, checked by SO_PEERCRED)")
	f.StringVar(&httpAddr, "http", "", "serve the HTTP API at this address (e.g. 127.0.0.1:7878)")
	f.StringVar(&token, "token", e.getenv("ARBOR_TOKEN"), "HTTP bearer token ($ARBOR_TOKEN; default: the one kept in HOME/http.token, made at the first start); required off loopback")
	f.BoolVar(&noPT, "no-passthrough", false, "serve file data through the daemon even as root")
	f.StringVar(&transport, "fuse-transport", "", "how FUSE requests reach the daemon: auto (io_uring where the kernel has it, else /dev/fuse), uring, or dev (default dev: io_uring is opt-in)")
	f.BoolVarP(&verbose, "verbose", "v", false, "log debug messages")
	f.IntVar(&maxConns, "max-conns", 0, "cap on socket connections (default: a share of the descriptor limit)")
	f.IntVar(&maxPerUID, "max-conns-per-uid", 0, "cap on one uid's socket connections (default: all of them, half with --allow-uid)")
	f.DurationVar(&idle, "idle-timeout", 0, "close a socket connection idle this long, with nothing in flight and no watch (default 2m)")
	cmd.MarkFlagFilename("config", "toml")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		home, err := filepath.Abs(e.home)
		if err != nil {
			return err
		}
		explicit := configPath != ""
		if !explicit {
			configPath = filepath.Join(home, "arbord.toml")
		}
		fc, err := readDaemonFile(configPath, explicit)
		if err != nil {
			return err
		}
		if f.Changed("socket") {
			fc.Socket = socket
		}
		if f.Changed("http") {
			fc.HTTP = httpAddr
		}
		if f.Changed("allow-uid") {
			if fc.AllowUIDs, err = parseUIDs(allow); err != nil {
				return err
			}
		}
		if f.Changed("fuse-transport") {
			fc.FUSETransport = transport
		}
		if f.Changed("no-passthrough") {
			pt := !noPT
			fc.Passthrough = &pt
		}
		if verbose {
			fc.LogLevel = "debug"
		}
		if f.Changed("max-conns") {
			fc.MaxConns = maxConns
		}
		if f.Changed("max-conns-per-uid") {
			fc.MaxConnsPerUID = maxPerUID
		}
		if f.Changed("idle-timeout") {
			fc.IdleTimeout = idle.String()
		}
		cfg, err := fc.config(home)
		if err != nil {
			return fmt.Errorf("%s: %w", configPath, err)
		}
		cfg.Token = token
		cfg.Logger = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
		return daemon.Run(e.ctx, cfg.Config)
	}
	cmd.AddCommand(withOps(e.daemonStopCmd(), api.OpShutdown))
	return cmd
}

func parseUIDs(s string) ([]int, error) {
	var uids []int
	for _, f := range strings.Split(s, ",") {
		u, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || u < 0 {
			return nil, usagef("--allow-uid: %q is not a uid", f)
		}
		uids = append(uids, u)
	}
	return uids, nil
}

// daemonStopCmd asks the daemon of the home to exit and waits until it has
// (its lock on HOME/arbord.lock is free: every mount is down by then).
func (e *env) daemonStopCmd() *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:     "stop",
		Short:   "Ask the running daemon to exit (unmounting everything) and wait",
		Long:    "Asks the daemon of the home to exit and waits until it has: every mount is down\nthen (and remembered for its next start). No daemon running is no error.",
		Example: "  arbor daemon stop\n  arbor daemon stop --home /tmp/arbor --timeout 1m",
		Args:    exactArgs(0, 0),
	}
	cmd.Flags().DurationVar(&wait, "timeout", 30*time.Second, "how long to wait for the daemon to exit")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		home, sock := e.home, e.socketOrDefault()
		cl := client.New(sock)
		defer cl.Close()
		if _, err := cl.Ping(e.ctx); err != nil {
			fmt.Fprintf(e.stdout, "no daemon answers on %s\n", sock)
			return nil
		}
		if _, err := cl.Do(e.ctx, api.Request{Op: api.OpShutdown}); err != nil {
			var ae *api.Error
			if errors.As(err, &ae) {
				return err
			}
			// The connection can go down with the daemon before the reply: wait and see.
		}
		lock, err := os.OpenFile(filepath.Join(home, "arbord.lock"), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		defer lock.Close()
		deadline := time.Now().Add(wait)
		for syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil {
			if time.Now().After(deadline) {
				return fmt.Errorf("the daemon of %s did not exit within %s (see %s)", home, wait, logPath(home))
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
	return cmd
}

// benchCmd is arbor bench; arbor bench fs passes its flags to fsbench.Main.
func (e *env) benchCmd() *cobra.Command {
	b := &cobra.Command{
		Use:               "bench",
		Short:             "Benchmarks",
		Long:              "Benchmarks of Arbor against its peers.",
		Example:           "  arbor bench fs --case create --size 64M",
		Args:              subcommandArgs,
		RunE:              helpRunE,
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	fs := &cobra.Command{
		Use:   "fs [flags]",
		Short: "Filesystem benchmark: native, overlayfs, fuse-overlayfs and Arbor",
		Long: `Runs the filesystem benchmark cases against native, overlayfs, fuse-overlayfs
and Arbor's mounts and prints a table of medians (--json for the report).
arbor bench fs --list names the cases and systems.`,
		Example:            "  arbor bench fs --list\n  arbor bench fs --case create,git-status --size 64M\n  arbor bench fs --json --json-out bench.json",
		DisableFlagParsing: true, // fsbench.Main owns its flags
	}
	fs.RunE = func(cmd *cobra.Command, args []string) error {
		if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" || a == "-help" }) {
			fmt.Fprintf(e.stdout, "%s\n\nExamples:\n%s\n\n", cmd.Long, cmd.Example)
			fsbench.Main(e.ctx, []string{"-h"}, e.stdout, e.stdout, nil)
			return nil
		}
		if code := fsbench.Main(e.ctx, args, e.stdout, e.stderr, fsbench.ArborSystems()); code != 0 {
			if code == 2 {
				return usagef("bad usage (see arbor bench fs --help)")
			}
			return exitError(code)
		}
		return nil
	}
	sb := &cobra.Command{
		Use:   "sandbox [flags]",
		Short: "Process sandbox benchmark: Arbor's jail, bubblewrap and unshare",
		Long: `Runs the process sandbox's cases (start to first byte, exec round trip, kill of
100 processes, fork of a live sandbox with 0 and 50+50 MiB, idle memory) on
Arbor's jail, bubblewrap and unshare side by side, and prints a table of
medians with the targets (--json for the report). Needs root.`,
		Example:            "  arbor bench sandbox\n  arbor bench sandbox --case start,exec --rounds 50",
		DisableFlagParsing: true, // sandboxbench.Main owns its flags
	}
	sb.RunE = func(cmd *cobra.Command, args []string) error {
		if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" || a == "-help" }) {
			fmt.Fprintf(e.stdout, "%s\n\nExamples:\n%s\n\n", cmd.Long, cmd.Example)
			sandboxbench.Main(e.ctx, []string{"-h"}, e.stdout, e.stdout)
			return nil
		}
		if code := sandboxbench.Main(e.ctx, args, e.stdout, e.stderr); code != 0 {
			if code == 2 {
				return usagef("bad usage (see arbor bench sandbox --help)")
			}
			return exitError(code)
		}
		return nil
	}
	vmb := &cobra.Command{
		Use:   "vm [flags]",
		Short: "microVM benchmark: fork pause, child start, fork_batch, PSS, suspend and resume",
		Long: `Runs the vm backend's microVMs (internal/vm) outside the daemon: per fork_batch
size (1, 4, 16; --sizes 1,4,16,50 for the largest) the source's pause, each
child's time from the fork call to running and to its agent's first reply,
the batch's total, PSS per child after the fork and after each child wrote
10 MiB; then suspend and resume. Prints medians over --rounds and the
accelerator (kvm or tcg). Needs qemu-system-x86_64, a cloud kernel and
arbor-guest next to arbor or on PATH.`,
		Example:            "  arbor bench vm\n  arbor bench vm --rounds 3 --sizes 1,4,16,50",
		DisableFlagParsing: true, // vmbench.Main owns its flags
	}
	vmb.RunE = func(cmd *cobra.Command, args []string) error {
		if slices.ContainsFunc(args, func(a string) bool { return a == "-h" || a == "--help" || a == "-help" }) {
			fmt.Fprintf(e.stdout, "%s\n\nExamples:\n%s\n\n", cmd.Long, cmd.Example)
			vmbench.Main(e.ctx, []string{"-h"}, e.stdout, e.stdout)
			return nil
		}
		if code := vmbench.Main(e.ctx, args, e.stdout, e.stderr); code != 0 {
			if code == 2 {
				return usagef("bad usage (see arbor bench vm --help)")
			}
			return exitError(code)
		}
		return nil
	}
	b.AddCommand(fs, sb, vmb)
	return b
}

func (e *env) demoCmd() *cobra.Command {
	d := &cobra.Command{
		Use:               "demo",
		Short:             "Demonstrations",
		Long:              "Demonstrations of Arbor end to end.",
		Example:           "  arbor demo coding-agent --workdir /tmp/demo",
		Args:              subcommandArgs,
		RunE:              helpRunE,
		ValidArgsFunction: cobra.NoFileCompletions,
	}
	var workdir, backend string
	var keep bool
	ca := &cobra.Command{
		Use:   "coding-agent",
		Short: "The coding-agent-fork demo: agents try strategies in forks, the best commits",
		Long: `Creates a tree over a generated repository, forks one node per strategy, runs
an agent script in each, commits the winner and aborts the rest, and writes the
evidence to WORKDIR/results/<timestamp>/.`,
		Example: "  arbor demo coding-agent\n  arbor demo coding-agent --workdir /tmp/demo --keep",
		Args:    exactArgs(0, 0),
	}
	ca.Flags().StringVar(&workdir, "workdir", "", "where the base directory and results/ go (default: the current directory)")
	ca.Flags().BoolVar(&keep, "keep", false, "keep the tree after the demo (inspect it with arbor tree nodes)")
	ca.Flags().StringVar(&backend, "backend", "", "dir, jail or vm (default: jail where the daemon serves sandboxes, else dir)")
	ca.MarkFlagDirname("workdir")
	ca.RunE = func(cmd *cobra.Command, args []string) error {
		if workdir == "" {
			workdir = "."
		}
		dir, err := absPath(workdir)
		if err != nil {
			return err
		}
		return e.withClient(func(cl *client.Client) error {
			_, err := demo.CodingAgent(e.ctx, demo.Config{Client: cl, Workdir: dir, Out: e.stdout, KeepTree: keep, Backend: backend})
			return err
		})
	}
	d.AddCommand(ca)
	return d
}

func (e *env) pingCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ping",
		Short:   "Check that the daemon answers (starting it if none does)",
		Long:    "Pings the daemon of the home and prints its version; starts the daemon if none answers.",
		Example: "  arbor ping",
		Args:    exactArgs(0, 0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(func(cl *client.Client) error {
				v, err := cl.Ping(e.ctx)
				if err != nil {
					return err
				}
				fmt.Fprintln(e.stdout, "pong", v)
				return nil
			})
		},
	}
}
