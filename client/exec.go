package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/arbor-dev/arbor/api"
)

// Exec runs req (op tree_exec: TreeID, NodeID, Argv, and optionally Env,
// Cwd, TimeoutNS) in a live node and calls out with each chunk of its
// output as it arrives; it returns how the command ended. The exec has a
// connection of its own; ctx's end closes it. An error from out ends the
// exec the same way. Errors wrap api sentinels: api.ErrNotSupported on a
// tree whose backend runs no commands (dir), api.ErrState when a verb
// took the node away mid-exec.
func (c *Client) Exec(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (api.ExecExit, error) {
	req.Op = api.OpTreeExec
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return api.ExecExit{}, errClosed
	}
	cn, err := c.dial(ctx)
	if err != nil {
		return api.ExecExit{}, err
	}
	defer cn.nc.Close()
	stop := context.AfterFunc(ctx, func() { cn.nc.Close() })
	defer stop()
	fail := func(err error) (api.ExecExit, error) {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return api.ExecExit{}, fmt.Errorf("arbor client: tree_exec: %w", err)
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
		case resp.Status == api.StatusExecOutput && resp.Output != nil:
			if err := out(*resp.Output); err != nil {
				return api.ExecExit{}, err
			}
		case resp.Status == api.StatusExecExit && resp.Exit != nil:
			return *resp.Exit, nil
		case resp.Status == api.StatusError:
			return api.ExecExit{}, replyError(resp)
		default:
			return fail(fmt.Errorf("%w: unexpected reply %q", api.ErrInternal, resp.Status))
		}
	}
}
