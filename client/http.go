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
	"os"
	"path/filepath"
	"strings"

	"github.com/arbor-dev/arbor/api"
)

// HTTPClient talks to arbord's HTTP face (the /v1 resources). It offers the
// same Do and Watch as Client; Do maps each op to its resource.
type HTTPClient struct {
	base  string
	token string
	hc    *http.Client
}

// NewHTTP returns a client of the daemon at baseURL (http://127.0.0.1:8890)
// that sends token as a bearer token if it is set. hc nil means
// http.DefaultClient.
func NewHTTP(baseURL, token string, hc *http.Client) *HTTPClient {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &HTTPClient{base: strings.TrimRight(baseURL, "/"), token: token, hc: hc}
}

// LoadToken reads the HTTP bearer token that arbord keeps in its home
// (home/http.token, api.HTTPTokenFile), made at the daemon's first start
// with HTTP when it was given no --token. Only the daemon's user can read
// it (mode 0600).
func LoadToken(home string) (string, error) {
	b, err := os.ReadFile(filepath.Join(home, api.HTTPTokenFile))
	if err != nil {
		return "", fmt.Errorf("arbor HTTP token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("arbor HTTP token: %s is empty", filepath.Join(home, api.HTTPTokenFile))
	}
	return tok, nil
}

// route maps a request to its method, path and body, by api's verb table.
func route(req api.Request) (method, path string, body any, err error) {
	v, ok := api.Lookup(req.Op)
	if !ok {
		return "", "", nil, api.Errorf(api.ErrBadRequest, "unknown op %q", req.Op)
	}
	if path, err = v.HTTPPath(req, url.PathEscape); err != nil {
		return "", "", nil, err
	}
	if v.Body != nil {
		body = v.Body(req)
	}
	return v.Method, path, body, nil
}

// Do sends one request to its resource and returns the reply; an error
// reply is an *api.Error.
func (c *HTTPClient) Do(ctx context.Context, req api.Request) (api.Response, error) {
	switch req.Op {
	case api.OpFileRead: // the body is the file: collected here, as the socket's one reply
		var b bytes.Buffer
		fi, err := c.ReadFile(ctx, req.TreeID, req.NodeID, req.Path, &b)
		if err != nil {
			return api.Response{}, err
		}
		return api.Response{Status: api.OpFileRead, TreeID: req.TreeID, NodeID: req.NodeID, Data: b.Bytes(), File: &fi}, nil
	case api.OpFileWrite:
		fi, err := c.WriteFile(ctx, req.TreeID, req.NodeID, req.Path, req.Mode, bytes.NewReader(req.Data))
		return api.Response{Status: "file_written", TreeID: req.TreeID, NodeID: req.NodeID, File: &fi}, err
	}
	method, path, body, err := route(req)
	if err != nil {
		return api.Response{}, &api.Error{Code: api.Code(err), Message: "arbor client: " + err.Error()}
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return api.Response{}, fmt.Errorf("arbor client: encoding %s: %w", req.Op, err)
		}
		rd = bytes.NewReader(b)
	}
	hr, err := c.newRequest(ctx, method, path, rd)
	if err != nil {
		return api.Response{}, err
	}
	res, err := c.hc.Do(hr)
	if err != nil {
		return api.Response{}, fmt.Errorf("arbor client: %s: %w", req.Op, err)
	}
	defer res.Body.Close()
	return decodeHTTP(req.Op, res)
}

func (c *HTTPClient) newRequest(ctx context.Context, method, path string, body io.Reader) (*http.Request, error) {
	hr, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("arbor client: %w", err)
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		hr.Header.Set("Authorization", "Bearer "+c.token)
	}
	return hr, nil
}

func decodeHTTP(op string, res *http.Response) (api.Response, error) {
	var resp api.Response
	b, err := io.ReadAll(io.LimitReader(res.Body, maxReply))
	if err != nil {
		return resp, fmt.Errorf("arbor client: %s: reading reply: %w", op, err)
	}
	if err := json.Unmarshal(b, &resp); err != nil || resp.Status == "" {
		if res.StatusCode >= 400 {
			return resp, &api.Error{Code: api.CodeInternal, Message: fmt.Sprintf("%s: HTTP %s", op, res.Status)}
		}
		return resp, fmt.Errorf("arbor client: %s: reply is not an arbord reply (HTTP %s)", op, res.Status)
	}
	if res.StatusCode >= 400 && resp.Status != api.StatusError {
		return resp, &api.Error{Code: api.CodeInternal, Message: fmt.Sprintf("%s: HTTP %s", op, res.Status)}
	}
	return resp, replyError(resp)
}

// Watch streams the events of treeID ("" for every tree) from GET
// /v1/events until ctx ends or the stream does; the channel is closed then.
func (c *HTTPClient) Watch(ctx context.Context, treeID string) (<-chan api.Event, error) {
	path := api.EventsPath // every tree
	if treeID != "" {
		v, _ := api.Lookup(api.OpTreeWatch)
		var err error
		if path, err = v.HTTPPath(api.Request{TreeID: treeID}, url.PathEscape); err != nil {
			return nil, err
		}
	}
	hr, err := c.newRequest(ctx, "GET", path, nil)
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Accept", "text/event-stream")
	res, err := c.hc.Do(hr)
	if err != nil {
		return nil, fmt.Errorf("arbor client: tree_watch: %w", err)
	}
	if res.StatusCode != http.StatusOK {
		defer res.Body.Close()
		_, err := decodeHTTP(api.OpTreeWatch, res)
		if err == nil {
			err = fmt.Errorf("arbor client: tree_watch: HTTP %s", res.Status)
		}
		return nil, err
	}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(nil, maxReply)
	// The first event is the snapshot; read it before returning so the
	// watch is registered when Watch returns.
	if _, err := nextSSE(sc); err != nil {
		res.Body.Close()
		return nil, fmt.Errorf("arbor client: tree_watch: %w", err)
	}
	ch := make(chan api.Event, 64)
	go func() {
		defer close(ch)
		defer res.Body.Close()
		for {
			r, err := nextSSE(sc)
			if err != nil || r.Event == nil {
				return
			}
			select {
			case ch <- *r.Event:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// nextSSE returns the data of the next server-sent event.
func nextSSE(sc *bufio.Scanner) (api.Response, error) {
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if data != nil {
				var r api.Response
				err := json.Unmarshal(data, &r)
				if err == nil {
					err = replyError(r)
				}
				return r, err
			}
		case bytes.HasPrefix(line, []byte("data:")):
			data = append(data, bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))...)
		}
	}
	if err := sc.Err(); err != nil {
		return api.Response{}, err
	}
	return api.Response{}, io.EOF
}
