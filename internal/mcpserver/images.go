package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbor-dev/arbor/api"
)

// ImageBuilder is what a Handler serves to stream an image build's
// progress (the daemon's router does; Socket does over the socket). A
// Handler without it builds through Do, the progress dropped.
type ImageBuilder interface {
	BuildImage(ctx context.Context, req api.Request, progress func(string) error) (api.Response, error)
}

// ImagesOut is list_images' output.
type ImagesOut struct {
	Images []api.Image `json:"images" jsonschema:"every image: name, id (the hash of its inputs), suite, variant, packages, size_bytes; create_tree with backend jail and image NAME runs a tree's sandboxes on one"`
}

// BuildImageIn is build_image's input.
type BuildImageIn struct {
	Image    string   `json:"image" jsonschema:"the image's name: 1-64 of A-Z a-z 0-9 . _ - (not starting with . - _)"`
	Suite    string   `json:"suite,omitempty" jsonschema:"Debian suite (default bookworm)"`
	Variant  string   `json:"variant,omitempty" jsonschema:"mmdebstrap variant (default minbase)"`
	Packages []string `json:"packages,omitempty" jsonschema:"extra Debian packages to install, e.g. [\"python3\", \"git\"]"`
}

// BuildImageOut is build_image's output.
type BuildImageOut struct {
	Image  api.Image `json:"image"`
	Cached bool      `json:"cached" jsonschema:"true if an image of the same inputs was built before (nothing was built now)"`
}

// addImageTools registers list_images and build_image. build_image is a
// long call (minutes for a first build, at once when cached): each line
// of the build's progress goes to the caller as a progress notification
// when the call carries a progress token, and the caller's cancellation
// (or a session that goes away) cancels the build, which then leaves
// nothing behind. image_rm has no tool: removing an image other trees may
// be created on is an operator's act (arbor image rm, DELETE
// /v1/images/{image}), not an agent's.
func (s *Server) addImageTools(ro, mutating *mcp.ToolAnnotations) {
	tool(s, &mcp.Tool{Name: "list_images", Annotations: ro,
		Description: "List the root filesystem images the daemon holds (Debian roots built with build_image). A jail tree created with image NAME runs its commands on that image instead of the host's files."},
		func(ctx context.Context, _ struct{}) (ImagesOut, error) {
			r, err := s.call(ctx, api.Request{Op: api.OpImageList})
			return ImagesOut{Images: nonNil(r.Images)}, err
		})
	mcp.AddTool(s.mcp, &mcp.Tool{Name: "build_image", Annotations: mutating,
		Description: "Build a root filesystem image from Debian packages under a name (mmdebstrap: a first build takes minutes and needs the Debian mirror; the same inputs again answer at once, cached). Progress lines come as progress notifications if you send a progress token. Then create_tree with backend jail and this image. Only the daemon's own user may build (others get forbidden); rebuilding, from other inputs, a name a tree runs on is busy."},
		func(ctx context.Context, call *mcp.CallToolRequest, in BuildImageIn) (*mcp.CallToolResult, BuildImageOut, error) {
			req := api.Request{Op: api.OpImageBuild, Image: in.Image, Suite: in.Suite, Variant: in.Variant, Packages: in.Packages}
			var r api.Response
			var err error
			if b, ok := s.cfg.Handler.(ImageBuilder); ok {
				token := call.Params.GetProgressToken()
				n := 0
				err = s.observe(ctx, req.Op, func(ctx context.Context) error {
					var err error
					r, err = b.BuildImage(ctx, req, func(line string) error {
						if token == nil {
							return nil
						}
						n++
						return call.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: float64(n), Message: line})
					})
					return err
				})
			} else {
				r, err = s.call(ctx, req)
			}
			if err == nil && r.Image == nil {
				err = api.Errorf(api.ErrInternal, "build_image: the reply names no image")
			}
			if err != nil {
				return nil, BuildImageOut{}, asToolError(err)
			}
			return nil, BuildImageOut{Image: *r.Image, Cached: r.Cached}, nil
		})
}

// BuildImage builds an image over the socket, its progress streamed.
func (h Socket) BuildImage(ctx context.Context, req api.Request, progress func(string) error) (api.Response, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	return h.Client.BuildImage(ctx, req, func(line string) {
		if progress(line) != nil {
			cancel() // the caller went: the build is cancelled with the connection
		}
	})
}
