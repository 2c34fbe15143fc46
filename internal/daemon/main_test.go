package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/jail"
)

// daemonHomeEnv makes the test binary run as arbord on that home (the crash
// test re-executes itself this way, so it can SIGKILL a real daemon).
const daemonHomeEnv = "ARBOR_TEST_DAEMON_HOME"

// With daemonHomeEnv, daemonNoFileEnv sets the daemon's RLIMIT_NOFILE (soft
// and hard) before it starts, daemonIdleEnv its socket's idle timeout and
// daemonMaxConnsEnv its connection cap.
const (
	daemonNoFileEnv   = "ARBOR_TEST_DAEMON_NOFILE"
	daemonIdleEnv     = "ARBOR_TEST_DAEMON_IDLE"
	daemonMaxConnsEnv = "ARBOR_TEST_DAEMON_MAXCONNS"
)

func TestMain(m *testing.M) {
	jail.Main() // first: a jail sandbox's init is a re-exec of this binary
	if mode := os.Getenv(fusectlEnv); mode != "" {
		if err := prepareFuseCtl(mode); err != nil {
			fmt.Fprintln(os.Stderr, "prepare the mount namespace:", err)
			os.Exit(1)
		}
	}
	if home := os.Getenv(stuckEnv); home != "" {
		err := runStuck(home)
		fmt.Fprintln(os.Stderr, "stuck daemon:", err)
		os.Exit(1)
	}
	if home := os.Getenv(daemonHomeEnv); home != "" {
		cfg := Config{Home: home, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))}
		if v := os.Getenv(daemonNoFileEnv); v != "" {
			n, err := strconv.ParseUint(v, 10, 64)
			if err == nil {
				err = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: n, Max: n})
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "arbord: RLIMIT_NOFILE:", err)
				os.Exit(1)
			}
		}
		if v := os.Getenv(daemonIdleEnv); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				fmt.Fprintln(os.Stderr, "arbord:", err)
				os.Exit(1)
			}
			cfg.IdleTimeout = d
		}
		if v := os.Getenv(daemonMaxConnsEnv); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				fmt.Fprintln(os.Stderr, "arbord:", err)
				os.Exit(1)
			}
			cfg.MaxConns = n
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		err := Run(ctx, cfg)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "arbord:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// testLogger logs to stderr: the daemon's warnings show in a failing
// test's output and in a parent test's capture of a child.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}
