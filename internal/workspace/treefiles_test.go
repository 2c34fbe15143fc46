package workspace_test

import (
	"context"
	"os"
	"testing"

	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/filestest"
	"github.com/arbor-dev/arbor/internal/workspace"
)

// needFUSE skips without root and /dev/fuse, or fails when ARBOR_TEST_REQUIRE is set.
func needFUSE(t *testing.T) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "needs root for FUSE mounts"
	} else if _, err := os.Stat("/dev/fuse"); err != nil {
		why = "no /dev/fuse"
	}
	if why == "" {
		return
	}
	if os.Getenv("ARBOR_TEST_REQUIRE") != "" {
		t.Fatalf("%s (ARBOR_TEST_REQUIRE is set)", why)
	}
	t.Skip(why)
}

func newManager(t *testing.T) *workspace.Manager {
	t.Helper()
	m, err := workspace.New(workspace.Config{Home: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Error(err)
		}
	})
	return m
}

// TestTreeFilesConformance runs the engine's Files suite against the real
// files layer: a store mounted by cowfs.
func TestTreeFilesConformance(t *testing.T) {
	needFUSE(t)
	m := newManager(t)
	filestest.Run(t, func(ctx context.Context, dir, base string) (engine.Files, error) {
		return m.OpenTreeFiles(ctx, dir, base)
	})
}
