package enginetest

import (
	"testing"

	"github.com/arbor-dev/arbor/internal/engine"
)

// New returns a real engine with its home in a fresh temporary directory
// and OpenDirFiles for its trees (unless cfg says otherwise); it is closed
// at t's cleanup.
func New(t testing.TB, cfg engine.Config) *engine.Engine {
	t.Helper()
	if cfg.Home == "" {
		cfg.Home = t.TempDir()
	}
	if cfg.OpenFiles == nil {
		cfg.OpenFiles = OpenDirFiles
	}
	e, err := engine.New(cfg)
	if err != nil {
		t.Fatalf("enginetest: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("enginetest: close: %v", err)
		}
	})
	return e
}
