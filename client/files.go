package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"

	"github.com/arbor-dev/arbor/api"
)

// stream sends req on a connection of its own, then whatever send writes
// on it (input lines), and calls each with every reply line until it
// returns done. ctx's end closes the connection.
func (c *Client) stream(ctx context.Context, req api.Request, send func(nc net.Conn, stop <-chan struct{}) error, each func(api.Response) (done bool, err error)) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return errClosed
	}
	cn, err := c.dial(ctx)
	if err != nil {
		return err
	}
	defer cn.nc.Close()
	stop := context.AfterFunc(ctx, func() { cn.nc.Close() })
	defer stop()
	fail := func(err error) error {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("arbor client: %s: %w", req.Op, bareOpError(err))
	}
	line, _ := json.Marshal(req)
	if _, err := cn.nc.Write(append(line, '\n')); err != nil {
		return fail(err)
	}
	if send != nil {
		// The input goes out while the replies come in; it ends at its
		// reader's end or when the connection closes, and is waited for.
		sent, stop := make(chan error, 1), make(chan struct{})
		go func() { sent <- send(cn.nc, stop) }()
		defer func() {
			close(stop)
			cn.nc.Close()
			<-sent
		}()
	}
	for {
		resp, err := cn.read()
		if err != nil {
			// The daemon may have answered and closed while input was
			// still going out; what it said is what counts.
			return fail(err)
		}
		if resp.Status == api.StatusError {
			return replyError(resp)
		}
		done, err := each(resp)
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// sendInput writes r's data as api.Input lines of at most
// api.MaxInputChunk bytes, then the EOF line.
func sendInput(nc net.Conn, r io.Reader) error {
	buf := make([]byte, api.MaxInputChunk)
	enc := json.NewEncoder(nc)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if werr := enc.Encode(api.Input{Data: buf[:n]}); werr != nil {
				return werr
			}
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return enc.Encode(api.Input{EOF: true})
		}
		if err != nil {
			return err
		}
	}
}

// ReadFile copies the file at path of node (live or suspended) to w as it
// streams from the daemon (in chunks, never whole) and describes it.
func (c *Client) ReadFile(ctx context.Context, treeID, nodeID, path string, w io.Writer) (api.FileInfo, error) {
	var fi api.FileInfo
	req := api.Request{Op: api.OpFileRead, TreeID: treeID, NodeID: nodeID, Path: path}
	err := c.stream(ctx, req, nil, func(r api.Response) (bool, error) {
		if _, err := w.Write(r.Data); err != nil {
			return false, err
		}
		switch r.Status {
		case api.StatusFileData:
			return false, nil
		case api.OpFileRead:
			if r.File != nil {
				fi = *r.File
			}
			return true, nil
		}
		return false, fmt.Errorf("arbor client: file_read: %w: unexpected reply %q", api.ErrInternal, r.Status)
	})
	return fi, err
}

// WriteFile replaces the file at path of live node with r's data, mode
// (0: 0644), atomically: the data streams in chunks, and the file changes
// only once all of it arrived.
func (c *Client) WriteFile(ctx context.Context, treeID, nodeID, path string, mode uint32, r io.Reader) (api.FileInfo, error) {
	var fi api.FileInfo
	req := api.Request{Op: api.OpFileWrite, TreeID: treeID, NodeID: nodeID, Path: path, Mode: mode, Input: true}
	err := c.stream(ctx, req, func(nc net.Conn, _ <-chan struct{}) error { return sendInput(nc, r) }, func(resp api.Response) (bool, error) {
		if resp.File != nil {
			fi = *resp.File
		}
		return true, nil
	})
	return fi, err
}

// StatFile describes path of node (a symlink described, not followed).
func (c *Client) StatFile(ctx context.Context, treeID, nodeID, path string) (api.FileInfo, error) {
	r, err := c.Do(ctx, api.Request{Op: api.OpFileStat, TreeID: treeID, NodeID: nodeID, Path: path})
	return fileOf(r), err
}

// ListFiles describes the entries of directory path of node, by name.
func (c *Client) ListFiles(ctx context.Context, treeID, nodeID, path string) ([]api.FileInfo, error) {
	r, err := c.Do(ctx, api.Request{Op: api.OpFileList, TreeID: treeID, NodeID: nodeID, Path: path})
	return r.Entries, err
}

// RemoveFile removes path of node (with recursive, a directory and all in it).
func (c *Client) RemoveFile(ctx context.Context, treeID, nodeID, path string, recursive bool) error {
	_, err := c.Do(ctx, api.Request{Op: api.OpFileRemove, TreeID: treeID, NodeID: nodeID, Path: path, Recursive: recursive})
	return err
}

// Mkdir makes directory path of node, mode (0: 0755); with parents, the
// missing ones above it too, and an existing directory is no error.
func (c *Client) Mkdir(ctx context.Context, treeID, nodeID, path string, mode uint32, parents bool) (api.FileInfo, error) {
	r, err := c.Do(ctx, api.Request{Op: api.OpFileMkdir, TreeID: treeID, NodeID: nodeID, Path: path, Mode: mode, Parents: parents})
	return fileOf(r), err
}

func fileOf(r api.Response) api.FileInfo {
	if r.File == nil {
		return api.FileInfo{}
	}
	return *r.File
}

// Spawn starts req (TreeID, NodeID, Argv, ...) as a background process of
// the node and returns its id; it runs while the node is live.
func (c *Client) Spawn(ctx context.Context, req api.Request) (string, error) {
	req.Op, req.Detach = api.OpTreeExec, true
	r, err := c.Do(ctx, req)
	return r.ProcessID, err
}

// Processes lists node's background processes (running, and the last few
// that ended).
func (c *Client) Processes(ctx context.Context, treeID, nodeID string) ([]api.Process, error) {
	r, err := c.Do(ctx, api.Request{Op: api.OpExecList, TreeID: treeID, NodeID: nodeID})
	return r.ProcessList, err
}

// Kill kills background process id of node and every process it started.
func (c *Client) Kill(ctx context.Context, treeID, nodeID, id string) error {
	_, err := c.Do(ctx, api.Request{Op: api.OpExecKill, TreeID: treeID, NodeID: nodeID, ProcessID: id})
	return err
}

// Logs sends what background process id wrote to out (with follow, until
// it ends) and returns its exit if it ended.
func (c *Client) Logs(ctx context.Context, treeID, nodeID, id string, follow bool, out func(api.ExecOutput) error) (*api.ExecExit, error) {
	var x *api.ExecExit
	req := api.Request{Op: api.OpExecLogs, TreeID: treeID, NodeID: nodeID, ProcessID: id, Follow: follow}
	err := c.stream(ctx, req, nil, outputLines(req.Op, api.OpExecLogs, out, &x))
	return x, err
}
