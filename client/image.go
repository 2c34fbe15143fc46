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
	for {
		resp, err := cn.read()
		if err != nil {
			return fail(bareOpError(err))
		}
		switch {
		case resp.Status == api.StatusImageProgress:
			if progress != nil {
				progress(resp.Progress)
			}
		case resp.Status == api.StatusError:
			return api.Response{}, replyError(resp)
		case resp.Image != nil:
			return resp, nil
		default:
			return fail(fmt.Errorf("%w: unexpected reply %q", api.ErrInternal, resp.Status))
		}
	}
}
