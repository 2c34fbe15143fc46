package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/facetest"
	"github.com/arbor-dev/arbor/internal/httpapi"
)

// builder is an ImageBuilder whose build sends lines progress lines, then
// fails with fail (nil: succeeds), or with hold waits for its context's
// end after the first line and reports it on ended: a test double of the
// daemon's store (the real one is internal/daemon's TestImageScenarios).
type builder struct {
	chatty
	lines int
	fail  error
	hold  bool
	ended chan error
}

func (b *builder) BuildImage(ctx context.Context, req api.Request, progress func(string) error) (api.Response, error) {
	for i := range b.lines {
		if err := progress("I: step " + string(rune('a'+i))); err != nil {
			return api.Response{}, err
		}
		if b.hold {
			<-ctx.Done()
			b.ended <- ctx.Err()
			return api.Response{}, ctx.Err()
		}
	}
	if b.fail != nil {
		return api.Response{}, b.fail
	}
	return api.Response{Status: "image_built", Image: &api.Image{Name: req.Image, ID: "id1", Packages: req.Packages}}, nil
}

// TestImageBuildForms: POST /v1/images answers the image_built reply
// alone by default (collected), or streams image_progress lines before it
// as NDJSON or SSE; a failure before any line is the reply's HTTP status,
// after one the stream's last line; a client that goes away cancels the
// build; a Handler that builds no images answers 501.
func TestImageBuildForms(t *testing.T) {
	body := `{"image":"py","packages":["python3"]}`
	b := &builder{lines: 3}
	base := serve(t, b, httpapi.Config{})
	st, _, out := call(t, newHTTPClient(t), "POST", base+"/v1/images", testToken, body)
	var r api.Response
	if err := json.Unmarshal(out, &r); err != nil || st != 200 || r.Status != "image_built" || r.Image == nil || r.Image.Name != "py" || r.Progress != "" {
		t.Fatalf("collected: HTTP %d %s %v", st, out, err)
	}

	stream := func(accept, query string) (*http.Response, []string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), "POST", base+"/v1/images"+query, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var lines []string
		for sc := bufio.NewScanner(res.Body); sc.Scan(); {
			if l := sc.Text(); l != "" {
				lines = append(lines, l)
			}
		}
		return res, lines
	}
	for _, tc := range []struct{ accept, query, ctype, first, last string }{
		{"application/x-ndjson", "", "application/x-ndjson", `{"status":"image_progress","progress":"I: step a"}`, `"status":"image_built"`},
		{"", "?stream=ndjson", "application/x-ndjson", `{"status":"image_progress","progress":"I: step a"}`, `"status":"image_built"`},
		{"text/event-stream", "", "text/event-stream", "event: image_progress", `"status":"image_built"`},
		{"", "?stream=sse", "text/event-stream", "event: image_progress", `"status":"image_built"`},
	} {
		res, lines := stream(tc.accept, tc.query)
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != tc.ctype || len(lines) < 4 || lines[0] != tc.first || !strings.Contains(lines[len(lines)-1], tc.last) {
			t.Errorf("%s%s: HTTP %d %s, lines %q", tc.accept, tc.query, res.StatusCode, res.Header.Get("Content-Type"), lines)
		}
	}

	b.lines, b.fail = 0, api.Errorf(api.ErrForbidden, "image_build: uid 7 may not")
	if res, lines := stream("application/x-ndjson", ""); res.StatusCode != 403 || len(lines) != 1 || !strings.Contains(lines[0], `"code":"forbidden"`) {
		t.Errorf("a refused build, streamed: HTTP %d %q", res.StatusCode, lines)
	}
	b.lines, b.fail = 2, api.Errorf(api.ErrInternal, "image x: mmdebstrap failed")
	if res, lines := stream("application/x-ndjson", ""); res.StatusCode != 200 || len(lines) != 3 || !strings.Contains(lines[2], `"code":"internal"`) {
		t.Errorf("a build that fails midway, streamed: HTTP %d %q", res.StatusCode, lines)
	}

	hold := &builder{lines: 1, hold: true, ended: make(chan error, 1)}
	base = serve(t, hold, httpapi.Config{})
	ctx, cancel := context.WithCancel(t.Context())
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/images?stream=ndjson", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil || !strings.Contains(line, "image_progress") {
		t.Fatalf("first line %q %v", line, err)
	}
	cancel()
	res.Body.Close()
	select {
	case <-hold.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the build went on after its client went")
	}

	base = serve(t, facetest.NewEngine(t), httpapi.Config{})
	if st, _, out := call(t, newHTTPClient(t), "POST", base+"/v1/images", testToken, body); st != 501 {
		t.Errorf("a Handler without images: HTTP %d %s, want 501", st, out)
	}
}
