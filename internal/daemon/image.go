package daemon

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/image"
)

// The image verbs: the daemon builds images (it owns $ARBOR_HOME and runs
// as root; internal/image's doc says why) and refuses to change or remove
// one that a loaded tree runs on.
//
// Who may change the images: mmdebstrap runs as root, fetches and unpacks
// packages and runs their maintainer scripts, and the image it makes is
// the root of every jail tree that names it, whoever's tree that is. So
// image_build and image_rm are for root and the daemon's own uid, as
// shutdown is; a uid the socket merely admits (--allow-uid) may list the
// images and run trees on them, not build, replace or remove them. The
// HTTP and MCP faces ask as the daemon (their bearer token is the
// daemon's, in its 0700 home), so a token holder may.

// mayChangeImages refuses op unless ctx's requester is root or the
// daemon's uid. A request that carries no credentials is refused too.
func (r *router) mayChangeImages(ctx context.Context, op string) error {
	cred, ok := access.FromContext(ctx)
	if !ok {
		return api.Errorf(api.ErrForbidden, "%s: the requester is unknown: only root and uid %d may change images", op, r.uid)
	}
	if cred.UID != 0 && cred.UID != r.uid {
		return api.Errorf(api.ErrForbidden, "%s: uid %d may not change images (builds run as root; root and uid %d may)", op, cred.UID, r.uid)
	}
	return nil
}

// BuildImage serves image_build: progress gets each line of the build as
// it comes; the reply is "image_built" with the image, Cached when its
// inputs were built before.
func (r *router) BuildImage(ctx context.Context, req api.Request, progress func(string) error) (api.Response, error) {
	const op = api.OpImageBuild
	if err := r.mayChangeImages(ctx, op); err != nil {
		return api.Response{}, err
	}
	if req.Image == "" {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: image (the name) is required", op)
	}
	spec, err := r.images.Normalize(image.Spec{Name: req.Image, Suite: req.Suite, Variant: req.Variant, Packages: req.Packages})
	if err != nil {
		return api.Response{}, fmt.Errorf("%s: %w", op, err)
	}
	// A name a tree runs on may be built again from the same inputs (it
	// is cached), not from others: its trees' sandboxes bind its files.
	if old, err := r.images.Get(req.Image); err == nil && old.ID != image.ID(spec) {
		users, err := r.treesOn(req.Image)
		if err != nil {
			return api.Response{}, fmt.Errorf("%s: %w", op, err)
		}
		if len(users) > 0 {
			return api.Response{}, api.Errorf(api.ErrBusy, "%s: image %s is used by tree %s; build it under another name, or delete those trees first", op, req.Image, strings.Join(users, ", "))
		}
	}
	// A client that goes away (its progress cannot be sent) cancels its
	// build, which then leaves nothing behind.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	im, cached, err := r.images.Build(ctx, spec, func(line string) {
		if progress(line) != nil {
			cancel()
		}
	})
	if err != nil {
		return api.Response{}, fmt.Errorf("%s: %w", op, err)
	}
	a := im.API()
	return api.Response{Status: "image_built", Image: &a, Cached: cached}, nil
}

func (r *router) image(ctx context.Context, req api.Request) (api.Response, error) {
	switch req.Op {
	case api.OpImageList:
		ims, err := r.images.List()
		if err != nil {
			return api.Response{}, fmt.Errorf("%s: %w", req.Op, err)
		}
		out := make([]api.Image, 0, len(ims))
		for _, im := range ims {
			out = append(out, im.API())
		}
		return api.Response{Status: "image_list", Images: out}, nil
	default: // api.OpImageRm
		if err := r.mayChangeImages(ctx, req.Op); err != nil {
			return api.Response{}, err
		}
		if err := image.CheckName(req.Image); err != nil {
			return api.Response{}, fmt.Errorf("%s: %w", req.Op, err)
		}
		users, err := r.treesOn(req.Image)
		if err != nil {
			return api.Response{}, fmt.Errorf("%s: %w", req.Op, err)
		}
		if len(users) > 0 {
			return api.Response{}, api.Errorf(api.ErrBusy, "%s: image %s is used by tree %s; delete those trees first", req.Op, req.Image, strings.Join(users, ", "))
		}
		if err := r.images.Remove(req.Image); err != nil {
			return api.Response{}, fmt.Errorf("%s: %w", req.Op, err)
		}
		return api.Response{Status: api.StatusOK, Image: &api.Image{Name: req.Image}}, nil
	}
}

// treesOn names the loaded trees that run on image name (every owner's).
func (r *router) treesOn(name string) ([]string, error) {
	resp, err := r.eng.Do(context.Background(), api.Request{Op: api.OpTreeList})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, t := range resp.Trees {
		if t.Image == name {
			out = append(out, t.ID)
		}
	}
	slices.Sort(out)
	return out, nil
}
