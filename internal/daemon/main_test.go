package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"testing"
)

// daemonHomeEnv makes the test binary run as arbord on that home (the crash
// test re-executes itself this way, so it can SIGKILL a real daemon).
const daemonHomeEnv = "ARBOR_TEST_DAEMON_HOME"

func TestMain(m *testing.M) {
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
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		err := Run(ctx, Config{Home: home, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
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
