package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/arbor-dev/arbor/api"
)

// rawRoute is the method and path of a file verb for req.
func rawRoute(req api.Request) (string, string, error) {
	v, ok := api.Lookup(req.Op)
	if !ok {
		return "", "", api.Errorf(api.ErrBadRequest, "unknown op %q", req.Op)
	}
	p, err := v.HTTPPath(req, url.PathEscape)
	return v.Method, p, err
}

// send does one request of op whose body is body (raw, or nil) and
// returns the response, or the error reply as an *api.Error.
func (c *HTTPClient) send(ctx context.Context, req api.Request, body io.Reader, accept string) (*http.Response, error) {
	method, path, err := rawRoute(req)
	if err != nil {
		return nil, &api.Error{Code: api.Code(err), Message: "arbor client: " + err.Error()}
	}
	hr, err := c.newRequest(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/octet-stream")
	}
	if accept != "" {
		hr.Header.Set("Accept", accept)
	}
	res, err := c.hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("arbor client: %s: %w", req.Op, err)
	}
	if res.StatusCode >= 400 {
		defer res.Body.Close()
		_, err := decodeHTTP(req.Op, res)
		return nil, err
	}
	return res, nil
}

// ReadFile copies the file at path of node to w as it streams (the body
// of GET .../files/{path}) and describes it (from the reply's headers).
func (c *HTTPClient) ReadFile(ctx context.Context, treeID, nodeID, path string, w io.Writer) (api.FileInfo, error) {
	res, err := c.send(ctx, api.Request{Op: api.OpFileRead, TreeID: treeID, NodeID: nodeID, Path: path}, nil, "")
	if err != nil {
		return api.FileInfo{}, err
	}
	defer res.Body.Close()
	fi := api.FileInfo{Path: path, Type: api.FileRegular}
	if m, err := strconv.ParseUint(res.Header.Get("X-Arbor-File-Mode"), 0, 32); err == nil {
		fi.Mode = uint32(m)
	}
	fi.Size, _ = strconv.ParseInt(res.Header.Get("X-Arbor-File-Size"), 10, 64)
	fi.MTimeNS, _ = strconv.ParseInt(res.Header.Get("X-Arbor-File-Mtime"), 10, 64)
	if _, err := io.Copy(w, res.Body); err != nil {
		return fi, fmt.Errorf("arbor client: file_read %s: %w", path, err)
	}
	return fi, nil
}

// WriteFile replaces the file at path of node with r's data (the streamed
// body of PUT .../files/{path}), atomically.
func (c *HTTPClient) WriteFile(ctx context.Context, treeID, nodeID, path string, mode uint32, r io.Reader) (api.FileInfo, error) {
	req := api.Request{Op: api.OpFileWrite, TreeID: treeID, NodeID: nodeID, Path: path, Mode: mode}
	res, err := c.send(ctx, req, r, "")
	if err != nil {
		return api.FileInfo{}, err
	}
	defer res.Body.Close()
	resp, err := decodeHTTP(req.Op, res)
	return fileOf(resp), err
}

// Exec runs req in a live node and streams its output to out (the NDJSON
// form of POST .../exec); it returns how the command ended.
func (c *HTTPClient) Exec(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (api.ExecExit, error) {
	req.Op = api.OpTreeExec
	var x *api.ExecExit
	if err := c.lines(ctx, req, outputLines(req.Op, api.StatusExecExit, out, &x)); err != nil {
		return api.ExecExit{}, err
	}
	return *x, nil
}

// ExecCollect runs req and returns the collected form: the last
// api.MaxExecCollect bytes of each stream with how it ended.
func (c *HTTPClient) ExecCollect(ctx context.Context, req api.Request) (api.ExecResult, error) {
	req.Op = api.OpTreeExec
	method, path, body, err := route(req)
	if err != nil {
		return api.ExecResult{}, &api.Error{Code: api.Code(err), Message: "arbor client: " + err.Error()}
	}
	b, _ := json.Marshal(body)
	hr, err := c.newRequest(ctx, method, path, bytes.NewReader(b))
	if err != nil {
		return api.ExecResult{}, err
	}
	res, err := c.hc.Do(hr)
	if err != nil {
		return api.ExecResult{}, fmt.Errorf("arbor client: tree_exec: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode >= 400 {
		_, err := decodeHTTP(req.Op, res)
		return api.ExecResult{}, err
	}
	var xr api.ExecResult
	if err := json.NewDecoder(io.LimitReader(res.Body, maxReply)).Decode(&xr); err != nil {
		return api.ExecResult{}, fmt.Errorf("arbor client: tree_exec: reading reply: %w", err)
	}
	return xr, nil
}

// lines sends req (its JSON body) asking for NDJSON and calls each with
// every reply line until it returns done.
func (c *HTTPClient) lines(ctx context.Context, req api.Request, each func(api.Response) (bool, error)) error {
	method, path, body, err := route(req)
	if err != nil {
		return &api.Error{Code: api.Code(err), Message: "arbor client: " + err.Error()}
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	hr, err := c.newRequest(ctx, method, path, rd)
	if err != nil {
		return err
	}
	hr.Header.Set("Accept", "application/x-ndjson")
	res, err := c.hc.Do(hr)
	if err != nil {
		return fmt.Errorf("arbor client: %s: %w", req.Op, err)
	}
	defer res.Body.Close()
	if res.StatusCode >= 400 {
		_, err := decodeHTTP(req.Op, res)
		return err
	}
	br := bufio.NewReader(res.Body)
	for {
		line, err := readLine(br)
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return fmt.Errorf("arbor client: %s: %w", req.Op, err)
		}
		var r api.Response
		if err := json.Unmarshal(line, &r); err != nil {
			return fmt.Errorf("arbor client: %s: decoding reply: %w", req.Op, err)
		}
		if r.Status == api.StatusError {
			return replyError(r)
		}
		if done, err := each(r); done || err != nil {
			return err
		}
	}
}

// Logs sends what background process id wrote to out (with follow, until
// it ends) and returns its exit if it ended.
func (c *HTTPClient) Logs(ctx context.Context, treeID, nodeID, id string, follow bool, out func(api.ExecOutput) error) (*api.ExecExit, error) {
	var x *api.ExecExit
	req := api.Request{Op: api.OpExecLogs, TreeID: treeID, NodeID: nodeID, ProcessID: id, Follow: follow}
	err := c.lines(ctx, req, outputLines(req.Op, api.OpExecLogs, out, &x))
	return x, err
}
