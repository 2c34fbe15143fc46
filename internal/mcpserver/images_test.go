package mcpserver_test

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/lineapi"
	"github.com/arbor-dev/arbor/internal/mcpserver"
)

// images is a Handler with an image store: a test double of the daemon's
// router (the real store's builds over both faces are internal/daemon's
// TestImageScenarios). Its builds send two progress lines.
type images struct {
	noTrees
	mu    sync.Mutex
	built []api.Request
	fails error
}

func (h *images) Do(ctx context.Context, req api.Request) (api.Response, error) {
	if req.Op != api.OpImageList {
		return h.noTrees.Do(ctx, req)
	}
	return api.Response{Status: "image_list", Images: []api.Image{{Name: "py", ID: "abc", Packages: []string{"python3"}}}}, h.fails
}

func (h *images) BuildImage(ctx context.Context, req api.Request, progress func(string) error) (api.Response, error) {
	h.mu.Lock()
	h.built = append(h.built, req)
	h.mu.Unlock()
	if h.fails != nil {
		return api.Response{}, h.fails
	}
	for _, l := range []string{"I: downloading", "I: unpacking"} {
		if err := progress(l); err != nil {
			return api.Response{}, err
		}
	}
	return api.Response{Status: "image_built", Image: &api.Image{Name: req.Image, ID: "def", Packages: req.Packages}}, nil
}

// TestImageTools: list_images lists the Handler's images; build_image
// builds with the given inputs, sends each progress line as a progress
// notification when the call has a progress token (directly, and through
// Socket over a real socket face), and keeps the verb's error codes.
func TestImageTools(t *testing.T) {
	h := &images{}
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := lineapi.Listen(sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	ls, err := lineapi.New(lineapi.Config{Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ls.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	cl := client.New(sock)
	t.Cleanup(func() { cl.Close() })

	for _, tc := range []struct {
		name    string
		handler mcpserver.Handler
	}{{"direct", h}, {"socket", mcpserver.Socket{Client: cl}}} {
		t.Run(tc.name, func(t *testing.T) {
			h.fails = nil
			notes := make(chan string, 16)
			c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, &mcp.ClientOptions{
				ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
					notes <- r.Params.Message
				},
			})
			a := agent{t, pipe(t, mcpserver.Config{Handler: tc.handler}, c, nil)}
			var l mcpserver.ImagesOut
			a.call("list_images", map[string]any{}, &l)
			if len(l.Images) != 1 || l.Images[0].Name != "py" {
				t.Errorf("list_images: %+v", l)
			}
			p := &mcp.CallToolParams{Name: "build_image", Arguments: map[string]any{"image": "py2", "packages": []string{"python3", "git"}}}
			p.SetProgressToken("tok")
			res, err := a.cs.CallTool(t.Context(), p)
			if err != nil || res.IsError {
				t.Fatalf("build_image: %v %s", err, text(res))
			}
			h.mu.Lock()
			last := h.built[len(h.built)-1]
			h.mu.Unlock()
			if last.Image != "py2" || !slices.Equal(last.Packages, []string{"python3", "git"}) {
				t.Errorf("the build got %+v", last)
			}
			// The client handles notifications apart from replies: wait for them.
			var got []string
			for len(got) < 2 {
				select {
				case m := <-notes:
					got = append(got, m)
				case <-time.After(10 * time.Second):
					t.Fatalf("progress notifications %q, want 2", got)
				}
			}
			if !slices.Equal(got, []string{"I: downloading", "I: unpacking"}) {
				t.Errorf("progress notifications %q", got)
			}
			var out mcpserver.BuildImageOut
			a.call("build_image", map[string]any{"image": "py2"}, &out) // no token: no notifications
			if out.Image.Name != "py2" || out.Image.ID != "def" {
				t.Errorf("build_image: %+v", out)
			}
			a.call("list_images", map[string]any{}, &l) // after it, any notification would have come
			select {
			case m := <-notes:
				t.Errorf("a build without a progress token notified %q", m)
			default:
			}
			h.fails = api.Errorf(api.ErrForbidden, "image_build: uid 7 may not change images")
			a.fail("build_image", map[string]any{"image": "x"}, api.CodeForbidden)
			a.fail("list_images", map[string]any{}, api.CodeForbidden)
		})
	}
}
