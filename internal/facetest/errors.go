package facetest

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
)

// CauseENOSPC is the tree id for which ErrorHandler fails with a bare
// ENOSPC wrapped under ErrInternal (as the engine wraps an error of its
// files layer): it must cross every face as no_space.
const CauseENOSPC = "enospc"

// ErrorHandler fails every request on tree id CODE (a wire code of api's
// error table) with that code's sentinel, and on CauseENOSPC with an
// ENOSPC under ErrInternal; it answers ping. It ties the error table to a
// face (RunErrors, and the faces' own status and errno checks).
type ErrorHandler struct{}

// Err is the error ErrorHandler fails tree id with.
func (ErrorHandler) Err(tree string) error {
	if tree == CauseENOSPC {
		return fmt.Errorf("tree_nodes: %w: %w", api.ErrInternal, fmt.Errorf("copy up a.txt: %w", syscall.ENOSPC))
	}
	if s, ok := api.Sentinel(tree); ok {
		return api.Errorf(s, "tree %s fails as asked", tree)
	}
	return api.Errorf(api.ErrNotFound, "tree %q", tree)
}

// Do implements Handler.
func (h ErrorHandler) Do(ctx context.Context, req api.Request) (api.Response, error) {
	if req.Op == api.OpPing {
		return api.Response{Status: "pong", Version: Version}, nil
	}
	return api.Response{}, h.Err(req.TreeID)
}

// Watch implements Handler.
func (h ErrorHandler) Watch(ctx context.Context, tree string) (api.Response, <-chan api.Event, error) {
	return api.Response{}, nil, h.Err(tree)
}

// RunErrors checks, over the face start serves ErrorHandler on, that every
// row of api's error table arrives as an *api.Error with its code that
// errors.Is finds its sentinel in (over Do and Watch), and that a cause in
// the table (ENOSPC) names the code under ErrInternal.
func RunErrors(t *testing.T, start StartHandler) {
	s := start(t, ErrorHandler{})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for _, k := range api.Errors() {
		_, err := s.Face.Do(ctx, api.Request{Op: api.OpTreeNodes, TreeID: k.Code})
		wantCode(t, err, k, "tree_nodes")
		_, err = s.Face.Watch(ctx, k.Code)
		wantCode(t, err, k, "tree_watch")
	}
	_, err := s.Face.Do(ctx, api.Request{Op: api.OpTreeNodes, TreeID: CauseENOSPC})
	ns := api.Errors()[0]
	for _, k := range api.Errors() {
		if k.Code == api.CodeNoSpace {
			ns = k
		}
	}
	wantCode(t, err, ns, "ENOSPC under internal")
	mustDo(t, ctx, s, api.Request{Op: api.OpPing})
}

func wantCode(t *testing.T, err error, k api.ErrorKind, what string) {
	t.Helper()
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Code != k.Code || !errors.Is(err, k.Err) || ae.Message == "" {
		t.Errorf("%s failing with %s: got %#v, want an *api.Error with code %s wrapping %v", what, k.Code, err, k.Code, k.Err)
	}
}
