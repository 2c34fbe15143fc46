package vmbackend

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/backendtest"
	"github.com/arbor-dev/arbor/internal/testenv"
	"github.com/arbor-dev/arbor/internal/vm"
)

var (
	agentOnce sync.Once
	agentPath string
	agentErr  error
)

// testConfig is the backend's config for tests: the agent built from this
// tree, images cached under the temp dir.
func testConfig(t *testing.T) Config {
	t.Helper()
	testenv.NeedQEMU(t)
	home := filepath.Join(os.TempDir(), "arbor-vm-test-images")
	agentOnce.Do(func() {
		os.MkdirAll(home, 0o700)
		agentPath = filepath.Join(home, "arbor-guest")
		cmd := exec.Command("go", "build", "-o", agentPath, "github.com/arbor-dev/arbor/cmd/arbor-guest")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			agentErr = fmt.Errorf("build the agent: %v: %s", err, out)
		}
	})
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return Config{VM: vm.Config{Home: home, Agent: agentPath}}
}

func TestConformance(t *testing.T) {
	cfg := testConfig(t)
	backendtest.Run(t, Open(cfg))
}

var _ = context.Background
var _ engine.Backend
