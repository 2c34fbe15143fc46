package engine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/tree"
)

// A lease is one exec in flight on a node. The exec runs outside the tree's
// mutex; a verb that takes the node away from it (abort, prune, commit,
// suspend, evict, a drop of the tree, Close) ends the lease under the mutex,
// which cancels the exec's context with a cause that says which verb did.
// The verb does not wait for the exec to return: the backend kills what the
// node runs in the same verb (Stop, Suspend), which ends the command.
type lease struct {
	cancel context.CancelCauseFunc
}

// Limits on tree_exec's fields.
const (
	MaxArgs     = 4096    // argv and env entries, each
	MaxArgBytes = 1 << 20 // argv, env and cwd together
)

// takeLease starts a lease on node; ts.mu is held. The lease's context
// derives from the engine's lifetime, never from a request's.
func (e *Engine) takeLease(ts *treeState, node string) (context.Context, *lease) {
	ctx, cancel := context.WithCancelCause(e.ctx)
	l := &lease{cancel: cancel}
	ts.leaseMu.Lock()
	defer ts.leaseMu.Unlock()
	if ts.leases == nil {
		ts.leases = map[string]map[*lease]struct{}{}
	}
	if ts.leases[node] == nil {
		ts.leases[node] = map[*lease]struct{}{}
	}
	ts.leases[node][l] = struct{}{}
	return ctx, l
}

// release ends l after its exec returned (ts.mu is not needed).
func (ts *treeState) release(node string, l *lease) {
	ts.leaseMu.Lock()
	defer ts.leaseMu.Unlock()
	delete(ts.leases[node], l)
	if len(ts.leases[node]) == 0 {
		delete(ts.leases, node)
	}
	l.cancel(nil)
}

// endLeases cancels every exec on nodes ids, with why ("aborted") in the
// error the exec ends with; ts.mu is held.
func (ts *treeState) endLeases(ids []string, why string) {
	ts.leaseMu.Lock()
	defer ts.leaseMu.Unlock()
	for _, id := range ids {
		for l := range ts.leases[id] {
			l.cancel(api.Errorf(api.ErrState, "exec on node %s of tree %s ended: the node was %s", id, ts.id, why))
		}
	}
}

// endAllLeases cancels every exec on the tree; ts.mu is held.
func (ts *treeState) endAllLeases(why string) {
	ts.leaseMu.Lock()
	ids := make([]string, 0, len(ts.leases))
	for id := range ts.leases {
		ids = append(ids, id)
	}
	ts.leaseMu.Unlock()
	ts.endLeases(ids, why)
}

// leasesOn counts the execs in flight on node (for tests).
func (ts *treeState) leasesOn(node string) int {
	ts.leaseMu.Lock()
	defer ts.leaseMu.Unlock()
	return len(ts.leases[node])
}

func validExec(req api.Request) error {
	const op = api.OpTreeExec
	if err := validNode(op, "node_id", req.NodeID); err != nil {
		return err
	}
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return api.Errorf(api.ErrBadRequest, "%s: argv is required (the command and its arguments)", op)
	}
	if len(req.Argv) > MaxArgs || len(req.Env) > MaxArgs {
		return api.Errorf(api.ErrBadRequest, "%s: at most %d argv and %d env entries", op, MaxArgs, MaxArgs)
	}
	total := len(req.Cwd)
	for _, a := range append(append([]string{req.Cwd}, req.Argv...), req.Env...) {
		total += len(a)
		if strings.IndexByte(a, 0) >= 0 || !utf8.ValidString(a) {
			return api.Errorf(api.ErrBadRequest, "%s: argv, env and cwd must be UTF-8 without NUL bytes", op)
		}
	}
	if total > MaxArgBytes {
		return api.Errorf(api.ErrBadRequest, "%s: argv, env and cwd hold %d bytes, at most %d", op, total, MaxArgBytes)
	}
	for _, kv := range req.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return api.Errorf(api.ErrBadRequest, "%s: env entry %q is not KEY=VALUE", op, kv)
		}
	}
	if req.TimeoutNS < 0 {
		return api.Errorf(api.ErrBadRequest, "%s: timeout_ns %d is negative", op, req.TimeoutNS)
	}
	return nil
}

// Exec serves tree_exec: it runs req.Argv (with req.Env, in req.Cwd, for at
// most req.TimeoutNS) in live node req.NodeID of tree req.TreeID, sends its
// output to out as it comes and returns how it ended. It runs outside the
// tree's mutex, under a lease on the node (see lease), so that the tree's
// other verbs go on meanwhile; an exec ended by a verb fails with
// api.ErrState naming the verb ("the node was aborted"), one ended by
// ctx with ctx's error. On a backend without exec (dir) it fails with
// api.ErrNotSupported. The error wraps an api sentinel.
func (e *Engine) Exec(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (exit api.ExecExit, err error) {
	return e.ExecInput(ctx, req, nil, nil, out)
}

// ExecInput is Exec with the command's standard input read from stdin (nil:
// req.Stdin) and, for a tty command (req.TTY), its window resized to each
// size resize sends.
func (e *Engine) ExecInput(ctx context.Context, req api.Request, stdin io.Reader, resize <-chan api.Input, out func(api.ExecOutput) error) (exit api.ExecExit, err error) {
	const op = api.OpTreeExec
	start := time.Now()
	defer func() {
		if r := recover(); r != nil {
			e.log.Error("engine panic", "op", op, "panic", r, "stack", string(debug.Stack()))
			exit, err = api.ExecExit{}, api.Errorf(api.ErrInternal, "%s: internal error", op)
		}
		if err != nil && !isAPI(err) {
			err = fmt.Errorf("%s: %w: %w", op, api.ErrInternal, err)
		}
		if e.cfg.Observer != nil {
			e.cfg.Observer.OnOp(op, time.Since(start), err)
		}
	}()
	if err := validExec(req); err != nil {
		return api.ExecExit{}, err
	}
	lctx, l, ts, err := e.startExec(ctx, req)
	if err != nil {
		return api.ExecExit{}, err
	}
	defer e.execs.Done()
	defer ts.release(req.NodeID, l)
	stop := context.AfterFunc(ctx, func() { l.cancel(fmt.Errorf("%s: the request ended: %w", op, context.Cause(ctx))) })
	defer stop()
	cmd := command(req, stdin)
	if resize != nil {
		sizes := make(chan WindowSize)
		cmd.Resize = sizes
		fwd, fwdDone := context.WithCancel(lctx)
		defer fwdDone()
		var wg sync.WaitGroup
		defer wg.Wait()
		defer fwdDone()
		wg.Go(func() {
			for {
				select {
				case <-fwd.Done():
					return
				case in, ok := <-resize:
					if !ok {
						return
					}
					select {
					case sizes <- WindowSize{Rows: in.Rows, Cols: in.Cols}:
					case <-fwd.Done():
						return
					}
				}
			}
		})
	}
	exit, err = ts.backend.Exec(lctx, req.NodeID, cmd, out)
	if cause := context.Cause(lctx); lctx.Err() != nil && cause != nil {
		// The lease ended first: that, not what the killed command
		// reported, is why the exec ended.
		// The cause's code, not the backend's, is the exec's.
		if err != nil {
			return exit, fmt.Errorf("%w (the backend said: %v)", cause, err)
		}
		return exit, cause
	}
	if err != nil {
		return exit, fmt.Errorf("%s %s: %w", op, req.NodeID, err)
	}
	return exit, nil
}

// command is req's Command, its stdin stdin or else req.Stdin.
func command(req api.Request, stdin io.Reader) Command {
	if stdin == nil && req.Stdin != nil {
		stdin = bytes.NewReader(req.Stdin)
	}
	return Command{Argv: req.Argv, Env: req.Env, Cwd: req.Cwd, Timeout: time.Duration(req.TimeoutNS), Stdin: stdin,
		TTY: req.TTY, Rows: req.Rows, Cols: req.Cols}
}

// processes is b's Processes, or an error saying b runs none.
func processes(op string, b Backend) (Processes, error) {
	if p, ok := b.(Processes); ok {
		return p, nil
	}
	return nil, api.Errorf(api.ErrNotSupported, "%s: this tree's backend runs no background processes; backend jail does", op)
}

// spawn serves tree_exec with detach: the process starts in the background
// and the reply names it.
func (e *Engine) spawn(ctx context.Context, req api.Request) (api.Response, error) {
	const op = api.OpTreeExec
	if err := validExec(req); err != nil {
		return api.Response{}, err
	}
	if req.TTY {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: a background process has no terminal (tty with detach)", op)
	}
	lctx, _, b, done, err := e.useNode(ctx, req, false)
	if err != nil {
		return api.Response{}, err
	}
	defer done()
	pb, err := processes(op, b)
	if err != nil {
		return api.Response{}, err
	}
	p, err := pb.Spawn(lctx, req.NodeID, command(req, nil))
	if err != nil {
		return api.Response{}, e.leaseCause(lctx, req, err)
	}
	return api.Response{Status: "tree_exec_started", TreeID: req.TreeID, NodeID: req.NodeID, ProcessID: p.ID, ProcessList: []api.Process{p}}, nil
}

// processVerb serves exec_list and exec_kill.
func (e *Engine) processVerb(ctx context.Context, req api.Request) (api.Response, error) {
	if err := validNode(req.Op, "node_id", req.NodeID); err != nil {
		return api.Response{}, err
	}
	if req.Op == api.OpExecKill && req.ProcessID == "" {
		return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: process_id is required", req.Op)
	}
	lctx, _, b, done, err := e.useNode(ctx, req, req.Op == api.OpExecList)
	if err != nil {
		return api.Response{}, err
	}
	defer done()
	pb, err := processes(req.Op, b)
	if err != nil {
		return api.Response{}, err
	}
	resp := api.Response{Status: req.Op, TreeID: req.TreeID, NodeID: req.NodeID}
	if req.Op == api.OpExecKill {
		resp.Status, resp.ProcessID = api.StatusOK, req.ProcessID
		err = pb.Kill(lctx, req.NodeID, req.ProcessID)
	} else {
		resp.ProcessList, err = pb.ProcessList(lctx, req.NodeID)
		if resp.ProcessList == nil {
			resp.ProcessList = []api.Process{}
		}
	}
	if err != nil {
		return api.Response{}, e.leaseCause(lctx, req, err)
	}
	return resp, nil
}

// Logs serves exec_logs: the output of background process req.ProcessID
// goes to out (what the backend kept of it, then with req.Follow what it
// writes until it ends); it returns the process's exit once it ended.
func (e *Engine) Logs(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (*api.ExecExit, error) {
	req.Op = api.OpExecLogs
	if err := validNode(req.Op, "node_id", req.NodeID); err != nil {
		return nil, err
	}
	if req.ProcessID == "" {
		return nil, api.Errorf(api.ErrBadRequest, "%s: process_id is required", req.Op)
	}
	lctx, _, b, done, err := e.useNode(ctx, req, true)
	if err != nil {
		return nil, err
	}
	defer done()
	pb, err := processes(req.Op, b)
	if err != nil {
		return nil, err
	}
	x, err := pb.Logs(lctx, req.NodeID, req.ProcessID, req.Follow, out)
	return x, e.leaseCause(lctx, req, err)
}

// startExec checks the node is live, records the activity and takes the
// lease, under the tree's mutex; the caller calls e.execs.Done and releases
// the lease.
func (e *Engine) startExec(ctx context.Context, req api.Request) (context.Context, *lease, *treeState, error) {
	const op = api.OpTreeExec
	ts, err := e.get(op, req.TreeID)
	if err != nil {
		return nil, nil, nil, err
	}
	defer ts.mu.Unlock()
	if err := e.mayDrive(ctx, op, ts); err != nil {
		return nil, nil, nil, err
	}
	n, ok := ts.t.Node(req.NodeID)
	if !ok {
		return nil, nil, nil, api.Errorf(api.ErrNotFound, "%s: node %q in tree %s", op, req.NodeID, ts.id)
	}
	if n.State != tree.Live {
		return nil, nil, nil, api.Errorf(api.ErrState, "%s %s: the node is %s, not live (tree_resume makes a suspended node live)", op, n.ID, n.State)
	}
	if p, err := ts.t.PlanTouch(e.cfg.Now(), n.ID); err == nil {
		if err := e.saveApply(ts, p, nil, false); err != nil {
			return nil, nil, nil, err
		}
	}
	// Close sets closed under e.mu before it waits for the execs: an exec
	// is either counted before that wait or refused.
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, nil, nil, api.Errorf(api.ErrBusy, "%s: engine closed", op)
	}
	e.execs.Add(1)
	e.mu.Unlock()
	lctx, l := e.takeLease(ts, n.ID)
	return lctx, l, ts, nil
}
