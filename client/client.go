package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/api"
)

// maxReply bounds one reply line (a tree_nodes of a very large tree).
const maxReply = 256 << 20

// maxIdle bounds the pool of idle connections.
const maxIdle = 16

// Client talks to arbord over its Unix socket.
type Client struct {
	path string

	mu     sync.Mutex // guards idle and closed
	idle   []*conn
	closed bool
}

type conn struct {
	nc net.Conn
	br *bufio.Reader
}

// New returns a client of the socket at socketPath; it connects lazily.
func New(socketPath string) *Client { return &Client{path: socketPath} }

// Dial returns a client of the socket at socketPath after checking that
// something accepts connections there.
func Dial(ctx context.Context, socketPath string) (*Client, error) {
	c := New(socketPath)
	cn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	c.put(cn)
	return c, nil
}

// Close closes the idle connections; calls in flight finish on theirs, and
// later calls fail.
func (c *Client) Close() error {
	c.mu.Lock()
	idle := c.idle
	c.idle, c.closed = nil, true
	c.mu.Unlock()
	for _, cn := range idle {
		cn.nc.Close()
	}
	return nil
}

var errClosed = errors.New("arbor client: closed")

func (c *Client) dial(ctx context.Context) (*conn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", c.path)
	if err != nil {
		return nil, fmt.Errorf("arbor client: connecting to arbord: %w", err)
	}
	return &conn{nc: nc, br: bufio.NewReaderSize(nc, 64<<10)}, nil
}

// get returns an idle connection (reused true) or a new one.
func (c *Client) get(ctx context.Context) (*conn, bool, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, false, errClosed
	}
	for n := len(c.idle); n > 0; n = len(c.idle) {
		cn := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		if cn.alive() {
			return cn, true, nil
		}
		cn.nc.Close()
		c.mu.Lock()
	}
	c.mu.Unlock()
	cn, err := c.dial(ctx)
	return cn, false, err
}

// alive reports whether an idle connection can carry a request: nothing
// has arrived on it since its last reply (the daemon closes a connection
// idle past its timeout, with a line saying so, or at a restart).
func (cn *conn) alive() bool {
	if cn.br.Buffered() > 0 {
		return false
	}
	sc, ok := cn.nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	// One non-blocking peek (a read deadline would not do: an expired one
	// fails the read before it is tried).
	var perr error
	var b [1]byte
	if err := rc.Read(func(fd uintptr) bool {
		_, _, perr = syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	}); err != nil {
		return false
	}
	// Data (an unasked-for line) or the end of the stream: not reusable.
	return errors.Is(perr, syscall.EAGAIN)
}

func (c *Client) put(cn *conn) {
	c.mu.Lock()
	if !c.closed && len(c.idle) < maxIdle {
		c.idle = append(c.idle, cn)
		cn = nil
	}
	c.mu.Unlock()
	if cn != nil {
		cn.nc.Close()
	}
}

// Do sends one request and returns its reply. A reply with status "error"
// is returned as an *api.Error (and the reply itself).
func (c *Client) Do(ctx context.Context, req api.Request) (api.Response, error) {
	switch req.Op {
	case api.OpTreeWatch:
		return api.Response{}, fmt.Errorf("arbor client: use Watch for %s: %w", req.Op, api.ErrBadRequest)
	case api.OpImageBuild: // a stream: its progress dropped, its last reply returned (as HTTP's collected form)
		return c.BuildImage(ctx, req, nil)
	}
	line, err := json.Marshal(req)
	if err != nil {
		return api.Response{}, fmt.Errorf("arbor client: encoding %s: %w", req.Op, err)
	}
	line = append(line, '\n')
	for attempt := 0; ; attempt++ {
		cn, reused, err := c.get(ctx)
		if err != nil {
			return api.Response{}, err
		}
		resp, poisoned, err := cn.roundTrip(ctx, line)
		if err == nil && poisoned {
			cn.nc.Close()
			return resp, replyError(resp)
		}
		if err == nil && reused && attempt == 0 && resp.Status == api.StatusError && resp.Code == api.CodeLimit {
			// The daemon closed the idle connection as the request went
			// out (its idle timeout): it did not serve it. Once more, fresh.
			cn.nc.Close()
			continue
		}
		if err != nil {
			cn.nc.Close()
			// An idle connection the daemon closed (a restart) fails at once;
			// retry once on a fresh one, but only where repeating is harmless.
			if reused && attempt == 0 && ctx.Err() == nil && readOnly(req.Op) && connGone(err) {
				continue
			}
			if ctx.Err() != nil {
				return api.Response{}, fmt.Errorf("arbor client: %s: %w", req.Op, ctx.Err())
			}
			return api.Response{}, fmt.Errorf("arbor client: %s on %s: %w", req.Op, c.path, bareOpError(err))
		}
		c.put(cn)
		return resp, replyError(resp)
	}
}

// replyError turns an error reply into an *api.Error.
func replyError(resp api.Response) error {
	if resp.Status != api.StatusError {
		return nil
	}
	code := resp.Code
	if code == "" {
		code = api.CodeInternal
	}
	return &api.Error{Code: code, Message: resp.Message}
}

// readOnly: repeating op is harmless (api's verb table says so).
func readOnly(op string) bool {
	v, ok := api.Lookup(op)
	return ok && v.ReadOnly
}

// bareOpError drops the addresses from a *net.OpError: the daemon binds
// its socket under a private name before linking it into place, so the
// kernel's peer address is not the path the user knows (Do names that).
func bareOpError(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		cp := *oe
		cp.Source, cp.Addr = nil, nil
		return &cp
	}
	return err
}

func connGone(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// roundTrip writes one request line and reads one reply, within ctx. It
// reports poisoned if ctx's cancellation touched the connection's deadline
// (possibly after the reply arrived): such a connection is not reused.
func (cn *conn) roundTrip(ctx context.Context, line []byte) (resp api.Response, poisoned bool, err error) {
	// ctx's end (deadline or cancel) unblocks the I/O through the
	// connection's deadline; by then ctx.Err() is set, so callers can
	// report it rather than an i/o timeout.
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { cn.nc.SetDeadline(time.Unix(1, 0)) })
		defer func() { poisoned = !stop() }()
	}
	if _, err := cn.nc.Write(line); err != nil {
		// The daemon may have refused the connection (a limit) and closed
		// it before the request went out: its one line says why.
		if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) {
			cn.nc.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
			if resp, rerr := cn.read(); rerr == nil && resp.Status == api.StatusError {
				return resp, false, nil
			}
		}
		return api.Response{}, false, err
	}
	resp, err = cn.read()
	return resp, false, err
}

func (cn *conn) read() (api.Response, error) {
	b, err := readLine(cn.br)
	if err != nil {
		return api.Response{}, err
	}
	if d, ok := dataLine(b); ok {
		return api.Response{Status: api.StatusFileData, Data: d}, nil
	}
	var resp api.Response
	if err := json.Unmarshal(b, &resp); err != nil {
		return api.Response{}, fmt.Errorf("decoding reply: %w", err)
	}
	return resp, nil
}

// dataPrefix begins a file_read's data line as the daemon writes it.
var dataPrefix = []byte(`{"status":"` + api.StatusFileData + `","data_b64":"`)

// dataLine decodes a file_data line without the JSON decoder, whose
// scanning of half a megabyte of base64 costs more than the bytes' copy;
// any other line, or one this does not recognise whole, is not one (ok
// false: json decodes it).
func dataLine(b []byte) (data []byte, ok bool) {
	b = bytes.TrimRight(b, "\r\n")
	if !bytes.HasPrefix(b, dataPrefix) || !bytes.HasSuffix(b, []byte(`"}`)) {
		return nil, false
	}
	enc := b[len(dataPrefix) : len(b)-2]
	data = make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
	n, err := base64.StdEncoding.Decode(data, enc)
	if err != nil {
		return nil, false
	}
	return data[:n], true
}

func readLine(br *bufio.Reader) ([]byte, error) {
	b, err := br.ReadSlice('\n')
	if err == nil {
		return b, nil
	}
	var long []byte
	for errors.Is(err, bufio.ErrBufferFull) {
		long = append(long, b...)
		if len(long) > maxReply {
			return nil, fmt.Errorf("reply longer than %d bytes", maxReply)
		}
		b, err = br.ReadSlice('\n')
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, err
	}
	return append(long, b...), nil
}

// Watch streams the events of treeID ("" for every tree) until ctx ends or
// the daemon ends the stream; the channel is closed then. Its goroutine
// exits when the channel is closed.
func (c *Client) Watch(ctx context.Context, treeID string) (<-chan api.Event, error) {
	_, ch, err := c.WatchSnapshot(ctx, treeID)
	return ch, err
}

// WatchSnapshot is Watch that also returns the snapshot reply
// (Status "tree_watching", with the tree's nodes).
func (c *Client) WatchSnapshot(ctx context.Context, treeID string) (api.Response, <-chan api.Event, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return api.Response{}, nil, errClosed
	}
	cn, err := c.dial(ctx)
	if err != nil {
		return api.Response{}, nil, err
	}
	line, _ := json.Marshal(api.Request{Op: api.OpTreeWatch, TreeID: treeID})
	snap, poisoned, err := cn.roundTrip(ctx, append(line, '\n'))
	if err == nil {
		err = replyError(snap)
	}
	if err == nil && poisoned {
		err = context.Canceled
	}
	if err != nil {
		cn.nc.Close()
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return snap, nil, fmt.Errorf("arbor client: tree_watch: %w", err)
	}
	ch := make(chan api.Event, 64)
	stop := context.AfterFunc(ctx, func() { cn.nc.Close() })
	go func() {
		defer close(ch)
		defer stop()
		defer cn.nc.Close()
		for {
			resp, err := cn.read()
			if err != nil || resp.Status != api.StatusEvent || resp.Event == nil {
				return
			}
			select {
			case ch <- *resp.Event:
			case <-ctx.Done():
				return
			}
		}
	}()
	return snap, ch, nil
}
