package lineapi_test

import (
	"errors"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/facetest"
	"github.com/arbor-dev/arbor/internal/lineapi"
	"github.com/arbor-dev/arbor/internal/metrics"
)

// TestPendingLineBudget: 300 connections each send 128 KiB of a request
// line and no newline (38 MB held without a budget, as 1,500 such took a
// daemon to 2.6 GB). With a 1 MiB budget the server holds at most that for
// them (its own count, and the heap grows by little more), the ones past it
// get a limit line and are closed, a normal client still works, and the
// budget comes back when the partial lines go.
func TestPendingLineBudget(t *testing.T) {
	const (
		conns   = 300
		partial = 128 << 10
		max     = 1 << 20
	)
	m, err := metrics.New(metrics.Config{NoRuntime: true})
	if err != nil {
		t.Fatal(err)
	}
	path, s := serveServer(t, facetest.NewEngine(t), lineapi.Config{Metrics: m, MaxConns: 2 * conns,
		MaxLineBytes: 256 << 10, MaxPendingLineBytes: max, IdleTimeout: time.Minute})

	before := heapInUse()
	line := []byte(`{"op":"ping","label":"` + strings.Repeat("x", partial))
	cs := make([]net.Conn, conns)
	for i := range cs {
		cs[i] = dial(t, path)
	}
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(func() { c.Write(line) }) // refused ones see EPIPE: fine
	}
	wg.Wait()
	// Each connection is either refused (a limit line, then EOF) or holds
	// its partial line (no reply before the deadline).
	refused := make([]bool, conns)
	for i, c := range cs {
		wg.Go(func() {
			r, err := readReply(t, c, 3*time.Second)
			switch {
			case err == nil:
				if r.Code != api.CodeLimit || !strings.Contains(r.Message, "incomplete request lines") {
					t.Errorf("conn %d: reply %+v, want a limit line naming the budget", i, r)
				}
				refused[i] = true
			case !errors.Is(err, os.ErrDeadlineExceeded):
				t.Errorf("conn %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	held := 0
	for _, r := range refused {
		if !r {
			held++
		}
	}
	pending := s.PendingLineBytes()
	grew := int64(heapInUse()) - int64(before)
	t.Logf("%d connections hold partial lines, %d refused; pending %d bytes (budget %d); heap grew %d bytes", held, conns-held, pending, max, grew)
	if held == 0 || held == conns {
		t.Fatalf("%d of %d connections hold a partial line: want some held and some refused", held, conns)
	}
	if pending > max || pending == 0 {
		t.Fatalf("pending %d bytes, want within (0, %d]", pending, max)
	}
	// Unbounded, the partial lines alone would be conns*partial = 38 MB.
	if limit := int64(max + conns*24<<10); grew > limit {
		t.Fatalf("heap grew %d bytes under the flood, want at most %d", grew, limit)
	}
	if rec := scrape(t, m); !strings.Contains(rec, `arbor_line_connections_limited_total{reason="line_budget"}`) {
		t.Errorf("metrics do not count the refusals by line_budget")
	}

	// A normal client is served meanwhile.
	cl, err := client.Dial(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Ping(t.Context()); err != nil {
		t.Fatalf("ping beside the flood: %v", err)
	}
	if _, err := cl.List(t.Context()); err != nil {
		t.Fatalf("tree_list beside the flood: %v", err)
	}
	for _, c := range cs {
		c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.PendingLineBytes() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pending %d bytes after every partial line's connection closed", s.PendingLineBytes())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestPendingLineBudgetConfig: a budget below the longest line is refused.
func TestPendingLineBudgetConfig(t *testing.T) {
	if _, err := lineapi.New(lineapi.Config{Handler: facetest.ErrorHandler{}, MaxLineBytes: 4096, MaxPendingLineBytes: 4095}); err == nil {
		t.Fatal("New accepted a line budget below MaxLineBytes")
	}
}
