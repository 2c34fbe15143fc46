package audit_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/arbor-dev/arbor/internal/audit"
)

type flaky struct {
	fail bool
	n    int
}

func (f *flaky) Write(p []byte) (int, error) {
	if f.fail {
		return 0, errors.New("disk gone")
	}
	f.n++
	return len(p), nil
}

// TestLog: concurrent entries come out as whole JSON lines; a failing
// writer is logged once until it works again; a nil Log keeps nothing.
func TestLog(t *testing.T) {
	var out bytes.Buffer
	l := audit.New(&out, nil)
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { l.Write(audit.Entry{Face: audit.FaceLine, Op: "tree_fork", Tree: strings.Repeat("t", i)}) })
	}
	wg.Wait()
	n := 0
	for ln := range strings.Lines(out.String()) {
		var e audit.Entry
		if err := json.Unmarshal([]byte(ln), &e); err != nil || e.Time == "" || e.Op != "tree_fork" {
			t.Fatalf("line %q: %+v %v", ln, e, err)
		}
		n++
	}
	if n != 50 {
		t.Fatalf("%d lines, want 50", n)
	}

	var logged bytes.Buffer
	f := &flaky{fail: true}
	fl := audit.New(f, slog.New(slog.NewTextHandler(&logged, nil)))
	fl.Write(audit.Entry{})
	fl.Write(audit.Entry{})
	if c := strings.Count(logged.String(), "audit log write failed"); c != 1 {
		t.Fatalf("the failure was logged %d times, want once:\n%s", c, logged.String())
	}
	f.fail = false
	fl.Write(audit.Entry{})
	f.fail = true
	fl.Write(audit.Entry{})
	if c := strings.Count(logged.String(), "audit log write failed"); c != 2 || f.n != 1 {
		t.Fatalf("after a success the next failure is logged again: %d logs, %d writes", c, f.n)
	}

	var none *audit.Log = audit.New(nil, nil)
	none.Write(audit.Entry{}) // must not panic
}
