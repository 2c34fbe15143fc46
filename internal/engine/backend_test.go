package engine_test

import (
	"testing"

	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/backendtest"
)

func TestDirBackendConformance(t *testing.T) {
	backendtest.Run(t, engine.OpenDirBackend)
}

// The test double runs the suite too: the engine's tests of exec, leases
// and orders rest on it behaving as a backend must.
func TestHostBackendConformance(t *testing.T) {
	backendtest.Run(t, newHostBackends().open)
}
