package jailbackend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/backendtest"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestConformanceOutbound: the backend suite with every sandbox on
// outbound network (a pasta each, which every stop must end).
func TestConformanceOutbound(t *testing.T) {
	need(t)
	testenv.NeedCommand(t, testenv.Pasta, "pasta")
	open := Open(Config{})
	backendtest.Run(t, func(ctx context.Context, bc engine.BackendConfig) (engine.Backend, error) {
		bc.Network = api.NetworkOutbound
		return open(ctx, bc)
	})
}

// TestOptionsRefused: an image the daemon does not serve or that does
// not exist, a network that is none of ours, and pasta missing are each
// refused at open, with nothing left running.
func TestOptionsRefused(t *testing.T) {
	need(t)
	ctx := t.Context()
	bc := func(image, network string) engine.BackendConfig {
		return engine.BackendConfig{Tree: "t1", Dir: t.TempDir(), Base: t.TempDir(), Image: image, Network: network}
	}
	notFound := func(name string) (string, error) {
		return "", api.Errorf(api.ErrNotFound, "image %q does not exist", name)
	}
	for _, c := range []struct {
		name string
		cfg  Config
		bc   engine.BackendConfig
		want error
	}{
		{"no images served", Config{}, bc("py", ""), api.ErrBadRequest},
		{"no such image", Config{Image: notFound}, bc("py", ""), api.ErrNotFound},
		{"bad network", Config{}, bc("", "everywhere"), api.ErrBadRequest},
		{"no pasta", Config{Pasta: filepath.Join(t.TempDir(), "no-pasta")}, bc("", api.NetworkOutbound), api.ErrUnavailable},
	} {
		b, err := Open(c.cfg)(ctx, c.bc)
		if !errors.Is(err, c.want) {
			if b != nil {
				b.Close()
			}
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
			continue
		}
		if ents, _ := os.ReadDir(c.bc.Dir); len(ents) != 0 {
			t.Errorf("%s: left %d entries in the backend's directory", c.name, len(ents))
		}
	}
}
