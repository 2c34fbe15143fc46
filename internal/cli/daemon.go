package cli

import (
	"flag"
	"log/slog"
	"strconv"
	"strings"

	"github.com/arbor-dev/arbor/internal/daemon"
	"github.com/arbor-dev/arbor/internal/fsbench"
)

// daemon runs arbord in the foreground.
func (e *env) daemon(args []string) error {
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
