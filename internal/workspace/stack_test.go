package workspace_test

import (
	"context"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/workspace"
)

// stack is what the daemon composes: the engine over a Manager's files
// layer, where the ws_* verbs are served.
type stack struct {
	m   *workspace.Manager
	eng *engine.Engine
}

// openStack opens the engine of home over a new Manager.
func openStack(t testing.TB, home string) *stack {
	t.Helper()
	m, err := workspace.New(workspace.Config{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Config{Home: home,
		OpenFiles: func(ctx context.Context, dir, base string) (engine.Files, error) {
			return m.OpenTreeFiles(ctx, dir, base)
		},
		ResolveBase: m.ResolveBase,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &stack{m: m, eng: eng}
}

// newStack is openStack on a fresh home, closed when the test ends.
func newStack(t *testing.T) *stack {
	t.Helper()
	s := openStack(t, t.TempDir())
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func (s *stack) Do(ctx context.Context, r api.Request) (api.Response, error) { return s.eng.Do(ctx, r) }

func (s *stack) Close() error { return s.eng.Close() }

func do(t *testing.T, s *stack, r api.Request) api.Response {
	t.Helper()
	resp, err := s.Do(access.WithCred(context.Background(), access.Self()), r)
	if err != nil {
		t.Fatalf("%s: %v", r.Op, err)
	}
	return resp
}
