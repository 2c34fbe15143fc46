package api_test

import (
	"errors"
	"fmt"
	"slices"
	"syscall"
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

// TestErrorTable: a cause in the table names the code however it is
// wrapped (an ENOSPC under ErrInternal is no_space, not internal), each row
// has an HTTP status and an errno, and only internal is a 500 or EIO.
func TestErrorTable(t *testing.T) {
	enospc := fmt.Errorf("commit n2: write a.txt: %w", syscall.ENOSPC)
	for _, err := range []error{
		enospc,
		fmt.Errorf("tree_commit: %w: %w", api.ErrInternal, enospc),
		fmt.Errorf("x: %w", syscall.EDQUOT),
	} {
		if got := api.Code(err); got != api.CodeNoSpace {
			t.Errorf("Code(%v) = %s, want no_space", err, got)
		}
		if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
			t.Errorf("%v lost its cause", err)
		}
	}
	if got := api.Errno(fmt.Errorf("%w: %w", api.ErrInternal, syscall.EROFS)); got != syscall.EROFS {
		t.Errorf("Errno keeps the exact errno under an error: got %v, want EROFS", got)
	}
	rows := api.Errors()
	if len(rows) != len(api.Codes()) || rows[len(rows)-1].Code != api.CodeInternal {
		t.Fatalf("the table's last row must be internal: %+v", rows[len(rows)-1])
	}
	for _, k := range rows {
		if k.HTTPStatus < 400 || k.Errno == 0 || k.Err == nil || k.Code == "" {
			t.Errorf("row %s is incomplete: %+v", k.Code, k)
		}
		if (k.HTTPStatus == 500) != (k.Code == api.CodeInternal) || (k.Errno == syscall.EIO) != (k.Code == api.CodeInternal) {
			t.Errorf("row %s: only internal is HTTP 500 and EIO (got %d, %v)", k.Code, k.HTTPStatus, k.Errno)
		}
		if got := api.HTTPStatus(k.Code); got != k.HTTPStatus {
			t.Errorf("HTTPStatus(%s) = %d, want %d", k.Code, got, k.HTTPStatus)
		}
		if got := api.Errno(api.Errorf(k.Err, "x")); got != k.Errno {
			t.Errorf("Errno(%s) = %v, want %v", k.Code, got, k.Errno)
		}
		if got := api.Kind(fmt.Errorf("%w: %w", k.Err, errors.New("cause"))); got.Code != k.Code {
			t.Errorf("Kind of %s with a cause = %s", k.Code, got.Code)
		}
	}
	if api.HTTPStatus("weird") != 500 {
		t.Error("an unknown code is not a 500")
	}
	ns := rows[slices.IndexFunc(rows, func(k api.ErrorKind) bool { return k.Code == api.CodeNotSupported })]
	if ns.Err != api.ErrNotSupported || ns.HTTPStatus != 501 || ns.Errno != syscall.EOPNOTSUPP {
		t.Errorf("not_supported row: %+v", ns)
	}
}

// TestCollector: the collected form keeps the last Max bytes of each
// stream, in order, and says when it dropped some.
func TestCollector(t *testing.T) {
	var c api.Collector
	c.Max = 10
	for _, s := range []string{"abc", "defg", "hij"} { // exactly 10
		c.Add(api.ExecOutput{Stream: "stdout", Data: []byte(s)})
	}
	c.Add(api.ExecOutput{Stream: "stderr", Data: []byte("\xff\xfe")})
	r := c.Result(api.ExecExit{ExitCode: 3})
	if r.Stdout != "abcdefghij" || r.Truncated || r.ExitCode != 3 || string(r.StderrB64) != "\xff\xfe" || r.Stderr != "" {
		t.Fatalf("%+v", r)
	}
	c.Add(api.ExecOutput{Stream: "stdout", Data: []byte("klm")})
	if r := c.Result(api.ExecExit{}); r.Stdout != "defghijklm" || !r.Truncated {
		t.Fatalf("after wrapping: %+v", r)
	}
	c.Add(api.ExecOutput{Stream: "stdout", Data: []byte("0123456789ABCDEF")})
	if r := c.Result(api.ExecExit{}); r.Stdout != "6789ABCDEF" {
		t.Fatalf("a chunk larger than Max: %q", r.Stdout)
	}
	for i := range 25 {
		c.Add(api.ExecOutput{Stream: "stdout", Data: []byte{byte('a' + i)}})
	}
	if r := c.Result(api.ExecExit{}); r.Stdout != "pqrstuvwxy" {
		t.Fatalf("byte by byte: %q", r.Stdout)
	}
}
