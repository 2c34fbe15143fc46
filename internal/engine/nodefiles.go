package engine

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"unicode/utf8"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/nodefs"
	"github.com/arbor-dev/arbor/internal/tree"
)

// NodeFiles is a node's files as the files verbs (file_read, file_write,
// ...) reach them: paths in the node's own path space, resolved inside
// the node and never outside (nodefs.FS over host directories; a vm's
// guest agent would serve its own). Errors wrap api sentinels.
type NodeFiles interface {
	// Open opens a regular file for reading and describes it.
	Open(ctx context.Context, path string) (io.ReadCloser, api.FileInfo, error)
	// Write replaces path atomically with r's data, mode (0: 0644).
	Write(ctx context.Context, path string, mode uint32, r io.Reader) (api.FileInfo, error)
	Stat(ctx context.Context, path string) (api.FileInfo, error)
	List(ctx context.Context, path string) ([]api.FileInfo, error)
	Remove(ctx context.Context, path string, recursive bool) error
	Mkdir(ctx context.Context, path string, mode uint32, parents bool) (api.FileInfo, error)
}

// FileServer is a Backend that shows a node's files itself: more than its
// files directory (a jail's /workspace and /tmp), or through something
// other than the host's filesystem (a vm's guest agent). A Backend without
// it shows a node's files directory at "/".
type FileServer interface {
	// NodeFiles is node's files, whose files directory is filesPath.
	NodeFiles(node, filesPath string) (NodeFiles, error)
}

// Limits of the files verbs.
const (
	MaxPathBytes = 4096
	// MaxReadReply is the largest file file_read returns through Do (the
	// MCP tools' way); the faces stream larger ones (OpenFile).
	MaxReadReply = api.MaxInputChunk
)

func validFileReq(req api.Request) error {
	if err := validNode(req.Op, "node_id", req.NodeID); err != nil {
		return err
	}
	if len(req.Path) > MaxPathBytes || !utf8.ValidString(req.Path) {
		return api.Errorf(api.ErrBadRequest, "%s: path is not UTF-8 of at most %d bytes", req.Op, MaxPathBytes)
	}
	if req.Mode > 0o7777 {
		return api.Errorf(api.ErrBadRequest, "%s: mode %o is not a permission mode", req.Op, req.Mode)
	}
	return nil
}

// useNode checks that the requester may drive req's tree and that its
// node is in a state op serves (live; or suspended too when read-only
// holds), records the activity of a change, and takes a lease on the node
// (see lease): the returned context ends when a verb takes the node away.
// The caller calls done when it has finished with the node.
func (e *Engine) useNode(ctx context.Context, req api.Request, readOnly bool) (lctx context.Context, ts *treeState, backend Backend, done func(), err error) {
	op := req.Op
	ts, err = e.get(op, req.TreeID)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	defer ts.mu.Unlock()
	if err := e.mayDrive(ctx, op, ts); err != nil {
		return nil, nil, nil, nil, err
	}
	n, ok := ts.t.Node(req.NodeID)
	if !ok {
		return nil, nil, nil, nil, api.Errorf(api.ErrNotFound, "%s: node %q in tree %s", op, req.NodeID, ts.id)
	}
	switch {
	case n.State == tree.Live:
	case n.State == tree.Suspended && readOnly:
	case n.State == tree.Suspended:
		return nil, nil, nil, nil, api.Errorf(api.ErrState, "%s %s: the node is suspended: its files are read-only (tree_resume makes it live)", op, n.ID)
	default:
		return nil, nil, nil, nil, api.Errorf(api.ErrState, "%s %s: the node is %s", op, n.ID, n.State)
	}
	if !readOnly {
		if p, err := ts.t.PlanTouch(e.cfg.Now(), n.ID); err == nil {
			if err := e.saveApply(ts, p, nil, false); err != nil {
				return nil, nil, nil, nil, err
			}
		}
	}
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, nil, nil, nil, api.Errorf(api.ErrBusy, "%s: engine closed", op)
	}
	e.execs.Add(1)
	e.mu.Unlock()
	lctx, l := e.takeLease(ts, n.ID)
	if cred, ok := access.FromContext(ctx); ok {
		// Who asks goes on with the lease: what it makes is theirs.
		lctx = access.WithCred(lctx, cred)
	}
	stop := context.AfterFunc(ctx, func() { l.cancel(fmt.Errorf("%s: the request ended: %w", op, context.Cause(ctx))) })
	var once sync.Once
	done = func() {
		once.Do(func() {
			stop()
			ts.release(n.ID, l)
			e.execs.Done()
		})
	}
	return lctx, ts, ts.backend, done, nil
}

// nodeFiles is node id's files: the backend's (FileServer) or its files
// directory at "/".
func (ts *treeState) nodeFiles(b Backend, id, filesPath string) (NodeFiles, error) {
	if fsrv, ok := b.(FileServer); ok {
		return fsrv.NodeFiles(id, filesPath)
	}
	return nodefs.New(nodefs.Root{Prefix: "/", Dir: filesPath})
}

// withFiles runs fn on req's node's files under a lease (useNode).
func (e *Engine) withFiles(ctx context.Context, req api.Request, readOnly bool, fn func(ctx context.Context, nf NodeFiles) error) error {
	if err := validFileReq(req); err != nil {
		return err
	}
	lctx, ts, b, done, err := e.useNode(ctx, req, readOnly)
	if err != nil {
		return err
	}
	defer done()
	err = e.filesOf(lctx, ts, b, req.NodeID, fn)
	return e.leaseCause(lctx, req, err)
}

func (e *Engine) filesOf(ctx context.Context, ts *treeState, b Backend, id string, fn func(ctx context.Context, nf NodeFiles) error) error {
	path, err := ts.filesPathLocked(id)
	if err != nil {
		return err
	}
	nf, err := ts.nodeFiles(b, id, path)
	if err != nil {
		return fmt.Errorf("node %s: files: %w", id, err)
	}
	return fn(ctx, nf)
}

// filesPathLocked is filesPath under the tree's mutex (the files layer is
// called under it).
func (ts *treeState) filesPathLocked(id string) (string, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.filesPath(id)
}

// leaseCause makes err the lease's cause when a verb took the node away
// (the copy failed because of it), and wraps an error without a sentinel
// as internal.
func (e *Engine) leaseCause(lctx context.Context, req api.Request, err error) error {
	if err == nil {
		return nil
	}
	if cause := context.Cause(lctx); lctx.Err() != nil && cause != nil {
		return fmt.Errorf("%w (%v)", cause, err)
	}
	if !isAPI(err) {
		return fmt.Errorf("%s %s: %w: %w", req.Op, req.Path, api.ErrInternal, err)
	}
	return fmt.Errorf("%s: %w", req.Op, err)
}

// OpenFile serves file_read: it opens req.Path of node req.NodeID (live
// or suspended) for reading and describes it. The node is held (a lease:
// a verb that takes it away ends the read) until the reader is closed.
func (e *Engine) OpenFile(ctx context.Context, req api.Request) (io.ReadCloser, api.FileInfo, error) {
	req.Op = api.OpFileRead
	if err := validFileReq(req); err != nil {
		return nil, api.FileInfo{}, err
	}
	lctx, ts, b, done, err := e.useNode(ctx, req, true)
	if err != nil {
		return nil, api.FileInfo{}, err
	}
	var rc io.ReadCloser
	var fi api.FileInfo
	err = e.filesOf(lctx, ts, b, req.NodeID, func(ctx context.Context, nf NodeFiles) (err error) {
		rc, fi, err = nf.Open(ctx, req.Path)
		return err
	})
	if err != nil {
		err = e.leaseCause(lctx, req, err)
		done()
		return nil, api.FileInfo{}, err
	}
	return &leasedReader{ctx: lctx, r: rc, done: done, e: e, req: req}, fi, nil
}

// leasedReader is a file being read under a lease.
type leasedReader struct {
	ctx  context.Context
	r    io.ReadCloser
	done func()
	e    *Engine
	req  api.Request
}

func (l *leasedReader) Read(b []byte) (int, error) {
	if l.ctx.Err() != nil {
		return 0, l.e.leaseCause(l.ctx, l.req, l.ctx.Err())
	}
	n, err := l.r.Read(b)
	if err != nil && err != io.EOF {
		err = l.e.leaseCause(l.ctx, l.req, err)
	}
	return n, err
}

func (l *leasedReader) Close() error {
	defer l.done()
	return l.r.Close()
}

// WriteFile serves file_write: it replaces req.Path of live node
// req.NodeID atomically with r's data (req.Data when r is nil), mode
// req.Mode. A write cut short (r fails, ctx ends, a verb takes the node
// away) leaves the file as it was.
func (e *Engine) WriteFile(ctx context.Context, req api.Request, r io.Reader) (api.FileInfo, error) {
	req.Op = api.OpFileWrite
	if r == nil {
		r = bytes.NewReader(req.Data)
	}
	var fi api.FileInfo
	err := e.withFiles(ctx, req, false, func(ctx context.Context, nf NodeFiles) (err error) {
		fi, err = nf.Write(ctx, req.Path, req.Mode, r)
		return err
	})
	return fi, err
}

// fileVerb serves the files verbs that answer in one reply.
func (e *Engine) fileVerb(ctx context.Context, req api.Request) (api.Response, error) {
	resp := api.Response{Status: api.StatusOK, TreeID: req.TreeID, NodeID: req.NodeID}
	if v, ok := api.Lookup(req.Op); ok {
		resp.Status = v.Reply
	}
	switch req.Op {
	case api.OpFileRead:
		rc, fi, err := e.OpenFile(ctx, req)
		if err != nil {
			return api.Response{}, err
		}
		defer rc.Close()
		if fi.Size > MaxReadReply {
			return api.Response{}, api.Errorf(api.ErrLimit, "%s %s: %d bytes, more than one reply's %d: read it as a stream", req.Op, req.Path, fi.Size, MaxReadReply)
		}
		b, err := io.ReadAll(io.LimitReader(rc, MaxReadReply+1))
		if err != nil {
			return api.Response{}, err
		}
		if len(b) > MaxReadReply {
			return api.Response{}, api.Errorf(api.ErrLimit, "%s %s: it grew past one reply's %d bytes: read it as a stream", req.Op, req.Path, MaxReadReply)
		}
		resp.Data, resp.File = b, &fi
		if resp.Data == nil {
			resp.Data = []byte{}
		}
		return resp, nil
	case api.OpFileWrite:
		if req.Input {
			return api.Response{}, api.Errorf(api.ErrBadRequest, "%s: input lines are the face's to read (WriteFile)", req.Op)
		}
		fi, err := e.WriteFile(ctx, req, nil)
		resp.File = &fi
		return resp, err
	}
	readOnly := req.Op == api.OpFileStat || req.Op == api.OpFileList
	err := e.withFiles(ctx, req, readOnly, func(ctx context.Context, nf NodeFiles) error {
		switch req.Op {
		case api.OpFileStat:
			fi, err := nf.Stat(ctx, req.Path)
			resp.File = &fi
			return err
		case api.OpFileList:
			fi, err := nf.Stat(ctx, req.Path)
			if err != nil {
				return err
			}
			resp.File = &fi
			resp.Entries, err = nf.List(ctx, req.Path)
			if resp.Entries == nil {
				resp.Entries = []api.FileInfo{}
			}
			return err
		case api.OpFileRemove:
			return nf.Remove(ctx, req.Path, req.Recursive)
		case api.OpFileMkdir:
			fi, err := nf.Mkdir(ctx, req.Path, req.Mode, req.Parents)
			resp.File = &fi
			return err
		}
		return api.Errorf(api.ErrBadRequest, "unknown op %q", req.Op)
	})
	if err != nil {
		return api.Response{}, err
	}
	return resp, nil
}
