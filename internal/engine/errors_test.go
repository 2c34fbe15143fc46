package engine_test

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/engine/enginetest"
)

// failFiles fails every fork with err, as a files layer out of room does.
type failFiles struct {
	engine.Files
	err error
}

func (f failFiles) Fork(ctx context.Context, parent string, children []string) error { return f.err }

// TestErrorsKeepTheirCause: an errno from the files layer comes out of Do
// with its cause (errors.Is finds it) and the table's code: ENOSPC is
// no_space, not internal; an errno the table has no row for is internal
// and still carries it.
func TestErrorsKeepTheirCause(t *testing.T) {
	for _, tc := range []struct {
		cause error
		code  string
	}{
		{fmt.Errorf("copy up a.txt: %w", syscall.ENOSPC), api.CodeNoSpace},
		{fmt.Errorf("write: %w", syscall.EDQUOT), api.CodeNoSpace},
		{fmt.Errorf("mkdir: %w", syscall.EROFS), api.CodeInternal},
		{api.Errorf(api.ErrNotSupported, "exec: the dir backend runs no processes (jail does)"), api.CodeNotSupported},
	} {
		t.Run(tc.code, func(t *testing.T) {
			e := enginetest.New(t, engine.Config{OpenFiles: func(ctx context.Context, dir, base string) (engine.Files, error) {
				f, err := enginetest.OpenDirFiles(ctx, dir, base)
				return failFiles{f, tc.cause}, err
			}})
			do(t, e, api.Request{Op: api.OpTreeCreate, TreeID: "t", Base: t.TempDir()})
			_, err := e.Do(t.Context(), api.Request{Op: api.OpTreeFork, TreeID: "t", SourceID: "n1", Label: "a"})
			if got := api.Code(err); got != tc.code {
				t.Fatalf("fork over %v: code %s (%v), want %s", tc.cause, got, err, tc.code)
			}
			if !errors.Is(err, tc.cause) {
				t.Fatalf("fork: %v lost its cause %v", err, tc.cause)
			}
		})
	}
}
