package httpapi_test

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/httpapi"
)

// TestFilesDotPaths: a files route's "." and ".." segments, raw or
// escaped, reach the Handler as the request's path (the node resolves
// them), never a redirect, and never another route; other routes' paths
// are cleaned by the mux as before.
func TestFilesDotPaths(t *testing.T) {
	f := &pathRecorder{}
	base := serve(t, f, httpapi.Config{})
	for _, tc := range []struct{ path, want string }{
		{"/v1/trees/t/nodes/n1/files/a/../b", "a/../b"},
		{"/v1/trees/t/nodes/n1/files/a/%2E%2E/b", "a/../b"},
		{"/v1/trees/t/nodes/n1/files/./a//b/.", "./a/b/."},
		{"/v1/trees/t/nodes/n1/files/../../n2/files/x", "../../n2/files/x"},
		{"/v1/trees/t/nodes/n1/files/..", ".."},
	} {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", base+tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		got, node := f.last()
		if res.StatusCode != http.StatusNotFound || got != tc.want || node != "n1" {
			t.Errorf("GET %s: HTTP %d, the handler got %s %q; want 404 from n1 %q", tc.path, res.StatusCode, node, got, tc.want)
		}
	}
	// Not a files route: the mux's own cleaning (a redirect) stays.
	req, _ := http.NewRequestWithContext(t.Context(), "GET", base+"/v1/trees/t/../t", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusTemporaryRedirect {
		t.Errorf("GET /v1/trees/t/../t: HTTP %d, want the mux's 307", res.StatusCode)
	}
}

// pathRecorder is a Filer that records the node and path it was asked to
// read and has no file.
type pathRecorder struct {
	chatty
	mu         sync.Mutex
	node, path string
}

func (p *pathRecorder) last() (string, string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	path, node := p.path, p.node
	p.path, p.node = "", ""
	return path, node
}

func (p *pathRecorder) OpenFile(ctx context.Context, req api.Request) (io.ReadCloser, api.FileInfo, error) {
	p.mu.Lock()
	p.node, p.path = req.NodeID, req.Path
	p.mu.Unlock()
	return nil, api.FileInfo{}, api.Errorf(api.ErrNotFound, "no files")
}

func (p *pathRecorder) WriteFile(ctx context.Context, req api.Request, r io.Reader) (api.FileInfo, error) {
	return api.FileInfo{}, api.Errorf(api.ErrNotFound, "no files")
}
