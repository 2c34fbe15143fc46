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
