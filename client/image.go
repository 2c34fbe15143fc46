package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/arbor-dev/arbor/api"
)

// BuildImage builds the image req names (op image_build: Image, and
// optionally Suite, Variant, Packages), or finds it cached, calling
// progress with each line of the build's progress as it comes. The reply
// holds the image and whether it was cached. The build has a connection
// of its own; ctx's end closes it, which cancels the build (it leaves
// nothing behind).
func (c *Client) BuildImage(ctx context.Context, req api.Request, progress func(string)) (api.Response, error) {
	req.Op = api.OpImageBuild
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return api.Response{}, errClosed
	}
	cn, err := c.dial(ctx)
	if err != nil {
		return api.Response{}, err
	}
	defer cn.nc.Close()
	stop := context.AfterFunc(ctx, func() { cn.nc.Close() })
	defer stop()
	fail := func(err error) (api.Response, error) {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return api.Response{}, fmt.Errorf("arbor client: image_build: %w", err)
	}
	line, _ := json.Marshal(req)
	if _, err := cn.nc.Write(append(line, '\n')); err != nil {
		return fail(bareOpError(err))
	}
	var last api.Response
	each := imageLines(progress, &last)
	for {
		resp, err := cn.read()
		if err != nil {
			return fail(bareOpError(err))
		}
		if resp.Status == api.StatusError {
			return api.Response{}, replyError(resp)
		}
		if done, err := each(resp); err != nil || done {
			return last, err
		}
	}
}

// imageLines reads the lines of an image_build stream: each progress line
// goes to progress; the image_built line ends it, in *last.
func imageLines(progress func(string), last *api.Response) func(api.Response) (bool, error) {
	return func(r api.Response) (bool, error) {
		switch {
		case r.Status == api.StatusImageProgress:
			if progress != nil {
				progress(r.Progress)
			}
			return false, nil
		case r.Image != nil:
			*last = r
			return true, nil
		}
		return false, fmt.Errorf("arbor client: %s: %w: unexpected reply %q", api.OpImageBuild, api.ErrInternal, r.Status)
	}
}

// BuildImage builds the image req names (POST /v1/images, its progress
// streamed as NDJSON), calling progress with each line as it comes, as
// Client.BuildImage does over the socket. ctx's end cancels the build.
func (c *HTTPClient) BuildImage(ctx context.Context, req api.Request, progress func(string)) (api.Response, error) {
	req.Op = api.OpImageBuild
	var last api.Response
	if err := c.lines(ctx, req, imageLines(progress, &last)); err != nil {
		return api.Response{}, err
	}
	return last, nil
}
