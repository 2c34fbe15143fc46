package api_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/arbor-dev/arbor/api"
)

// TestCodes: every wire code maps to its own sentinel and back, across the
// wire form (api.Error), and no two codes share a sentinel.
func TestCodes(t *testing.T) {
	seen := map[error]string{}
	for _, code := range api.Codes() {
		s, ok := api.Sentinel(code)
		if !ok {
			t.Fatalf("code %q has no sentinel", code)
		}
		if prev, dup := seen[s]; dup {
			t.Errorf("codes %q and %q share a sentinel", prev, code)
		}
		seen[s] = code
		wrapped := fmt.Errorf("ctx: %w", api.Errorf(s, "x"))
		if got := api.Code(wrapped); got != code {
			t.Errorf("Code(%v) = %q, want %q", wrapped, got, code)
		}
		if wire := (&api.Error{Code: code, Message: "m"}); !errors.Is(wire, s) {
			t.Errorf("api.Error{%q} does not unwrap to its sentinel", code)
		}
	}
	if _, ok := api.Sentinel("weird"); ok {
		t.Error("an unknown code has a sentinel")
	}
	if !errors.Is(&api.Error{Code: "weird"}, api.ErrInternal) {
		t.Error("an unknown wire code does not unwrap to ErrInternal")
	}
	if api.Code(api.Errorf(api.ErrForbidden, "x")) != api.CodeForbidden {
		t.Error("forbidden is not in the table")
	}
}
