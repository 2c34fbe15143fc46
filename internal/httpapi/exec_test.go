package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/httpapi"
)

// chatty is an Execer whose command writes 64 KiB chunks, limit of them
// (0: until out fails): a test double of the engine's exec (the real one
// is internal/daemon's TestJailExecAndFilesOverFaces).
type chatty struct {
	limit    int
	produced atomic.Int64 // chunks out took
	ended    chan error
}

func (c *chatty) Do(ctx context.Context, req api.Request) (api.Response, error) {
	return api.Response{}, api.Errorf(api.ErrNotFound, "no trees")
}

func (c *chatty) Watch(ctx context.Context, id string) (api.Response, <-chan api.Event, error) {
	return api.Response{}, nil, api.Errorf(api.ErrNotFound, "no trees")
}

func (c *chatty) Exec(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (api.ExecExit, error) {
	chunk := []byte(strings.Repeat("y", 64<<10))
	for i := 0; c.limit == 0 || i < c.limit; i++ {
		if err := out(api.ExecOutput{Stream: "stdout", Data: chunk}); err != nil {
			if c.ended != nil {
				c.ended <- err
			}
			return api.ExecExit{}, err
		}
		c.produced.Add(1)
	}
	out(api.ExecOutput{Stream: "stderr", Data: []byte("done\n")})
	return api.ExecExit{ExitCode: 2, DurationNS: 1}, nil
}

// TestExecForms: POST .../exec collects into the last api.MaxExecCollect
// bytes of each stream (truncated past it) by default, streams NDJSON or
// SSE when asked, and a client that stops reading a stream holds the
// command back (it produces a bounded amount: back-pressure, not memory)
// until the client goes, which ends it.
func TestExecForms(t *testing.T) {
	body := `{"argv":["yes"]}`
	url := func(base string) string { return base + "/v1/trees/t/nodes/n1/exec" }

	c := &chatty{limit: 100} // 6.25 MiB
	base := serve(t, c, httpapi.Config{})
	st, _, b := call(t, newHTTPClient(t), "POST", url(base), testToken, body)
	var xr api.ExecResult
	if err := json.Unmarshal(b, &xr); err != nil || st != 200 {
		t.Fatalf("collected: HTTP %d %v", st, err)
	}
	if len(xr.Stdout) != api.MaxExecCollect || !xr.Truncated || xr.Stderr != "done\n" || xr.ExitCode != 2 || xr.Status != api.StatusExecExit {
		t.Fatalf("collected: %d bytes of stdout, truncated %v, stderr %q, exit %d", len(xr.Stdout), xr.Truncated, xr.Stderr, xr.ExitCode)
	}

	c.limit = 3
	for _, tc := range []struct{ accept, query, ctype, prefix string }{
		{"application/x-ndjson", "", "application/x-ndjson", "{"},
		{"", "?stream=ndjson", "application/x-ndjson", "{"},
		{"text/event-stream", "", "text/event-stream", "event: tree_exec_output"},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), "POST", url(base)+tc.query, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		if tc.accept != "" {
			req.Header.Set("Accept", tc.accept)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(res.Body)
		sc.Buffer(nil, 1<<20)
		var lines []string
		for sc.Scan() {
			if l := sc.Text(); l != "" {
				lines = append(lines, l)
			}
		}
		res.Body.Close()
		if res.Header.Get("Content-Type") != tc.ctype || len(lines) == 0 || !strings.HasPrefix(lines[0], tc.prefix) ||
			!strings.Contains(lines[len(lines)-1], `"status":"tree_exec_exit"`) || !strings.Contains(lines[len(lines)-1], `"exit_code":2`) {
			t.Errorf("%s%s: %s, %d lines, last %.200s", tc.accept, tc.query, res.Header.Get("Content-Type"), len(lines), lines[len(lines)-1])
		}
	}

	// Back-pressure: nobody reads.
	slow := &chatty{ended: make(chan error, 1)}
	base = serve(t, slow, httpapi.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "POST", url(base)+"?stream=ndjson", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	// It fills the socket's buffers, then stops: wait for 300 ms without a
	// chunk (at most 10 s).
	var n1, n2 int64 = -1, 0
	for deadline := time.Now().Add(10 * time.Second); n1 != n2 && time.Now().Before(deadline); {
		n1 = slow.produced.Load()
		time.Sleep(300 * time.Millisecond)
		n2 = slow.produced.Load()
	}
	if n2 != n1 || n2 > 1000 { // 64 MiB: socket buffers hold far less
		t.Errorf("with no reader the command went on: %d, then %d chunks of 64 KiB", n1, n2)
	}
	cancel()
	res.Body.Close()
	select {
	case <-slow.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not end when its client went")
	}
	t.Logf("a stalled stream held the command at %d chunks of 64 KiB", n2)
}

// TestFileWriteNotJSON: a PUT of a file with a JSON body type is refused
// (an envelope would be written as the file), before the Handler.
func TestFileWriteNotJSON(t *testing.T) {
	f := &writer{}
	base := serve(t, f, httpapi.Config{})
	req, _ := http.NewRequestWithContext(t.Context(), "PUT", base+"/v1/trees/t/nodes/n1/files/a.txt", strings.NewReader(`{"data_b64":"eA=="}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest || f.called {
		t.Errorf("PUT with a JSON body: HTTP %d (written: %v), want 400", res.StatusCode, f.called)
	}
}

// writer is a Filer that records whether it was asked to write.
type writer struct {
	chatty
	called bool
}

func (w *writer) OpenFile(ctx context.Context, req api.Request) (io.ReadCloser, api.FileInfo, error) {
	return nil, api.FileInfo{}, api.Errorf(api.ErrNotFound, "no files")
}

func (w *writer) WriteFile(ctx context.Context, req api.Request, r io.Reader) (api.FileInfo, error) {
	w.called = true
	return api.FileInfo{}, nil
}
