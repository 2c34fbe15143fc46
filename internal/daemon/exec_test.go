package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestTreeBackendOverSocket: through the real daemon (FUSE-mounted tree
// files), a tree's backend is dir unless named, an unknown one is refused
// naming the served ones, and tree_exec on a dir tree is not_supported.
func TestTreeBackendOverSocket(t *testing.T) {
	testenv.NeedFUSE(t)
	tg := realTarget(t)
	c := client.New(serveLine(t, tg.Handler))
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := c.Do(ctx, api.Request{Op: api.OpTreeCreate, Base: tg.Base, Backend: "nosuch"})
	if !errors.Is(err, api.ErrBadRequest) || !strings.Contains(err.Error(), "serves dir") {
		t.Fatalf("create with backend nosuch: %v, want bad_request naming dir", err)
	}
	if _, err := c.Do(ctx, api.Request{Op: api.OpTreeCreate, TreeID: "x", Base: tg.Base}); err != nil {
		t.Fatal(err)
	}
	l, err := c.Do(ctx, api.Request{Op: api.OpTreeList})
	if err != nil || len(l.Trees) != 1 || l.Trees[0].Backend != "dir" {
		t.Fatalf("tree_list: %+v %v", l.Trees, err)
	}
	_, err = c.Exec(ctx, api.Request{TreeID: "x", NodeID: "n1", Argv: []string{"true"}}, func(api.ExecOutput) error { return nil })
	if !errors.Is(err, api.ErrNotSupported) || !strings.Contains(err.Error(), "jail or vm") {
		t.Fatalf("exec on a dir tree: %v, want not_supported naming jail or vm", err)
	}
}
