package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"

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

// ExecInput is Exec with the command's standard input forwarded from stdin
// as it comes (nil: none; EOF when stdin ends) and, for a tty command
// (req.TTY, req.Rows, req.Cols), its window resized to each size resize
// sends. The exec's connection ends with it. stdin is read by a goroutine
// of its own, which returns at stdin's next Read after the exec ended (a
// terminal's Read may take until the next key): give a reader that ends,
// or one the caller can close, when that matters.
func (c *Client) ExecInput(ctx context.Context, req api.Request, stdin io.Reader, resize <-chan api.Input, out func(api.ExecOutput) error) (api.ExecExit, error) {
	if stdin == nil && resize == nil {
		return c.Exec(ctx, req, out)
	}
	req.Op, req.Input = api.OpTreeExec, true
	var x *api.ExecExit
	send := func(nc net.Conn, stop <-chan struct{}) error {
		done := make(chan struct{})
		defer close(done)
		chunks := make(chan []byte)
		if stdin != nil {
			go func() { // not waited for: see the doc comment
				defer close(chunks)
				for {
					buf := make([]byte, 32<<10)
					n, err := stdin.Read(buf)
					if n > 0 {
						select {
						case chunks <- buf[:n]:
						case <-done:
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
		enc := json.NewEncoder(nc)
		for {
			select {
			case b, ok := <-chunks:
				in := api.Input{Data: b}
				if !ok {
					in, chunks = api.Input{EOF: true}, nil
				}
				if err := enc.Encode(in); err != nil {
					return err
				}
			case in, ok := <-resize:
				if !ok {
					resize = nil
					continue
				}
				if err := enc.Encode(api.Input{Rows: in.Rows, Cols: in.Cols}); err != nil {
					return err
				}
			case <-stop:
				return nil
			}
		}
	}
	if err := c.stream(ctx, req, send, outputLines(req.Op, api.StatusExecExit, out, &x)); err != nil {
		return api.ExecExit{}, err
	}
	return *x, nil
}

// outputLines reads the lines of an output stream (tree_exec, exec_logs):
// each output chunk goes to out; the line of status last ends it, its
// exit (if any) in *x.
func outputLines(op, last string, out func(api.ExecOutput) error, x **api.ExecExit) func(api.Response) (bool, error) {
	return func(r api.Response) (bool, error) {
		switch {
		case r.Status == api.StatusExecOutput && r.Output != nil:
			return false, out(*r.Output)
		case r.Status == last && (r.Exit != nil || last != api.StatusExecExit):
			*x = r.Exit
			return true, nil
		}
		return false, fmt.Errorf("arbor client: %s: %w: unexpected reply %q", op, api.ErrInternal, r.Status)
	}
}
