package lineapi

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/audit"
	"github.com/arbor-dev/arbor/internal/metrics"
)

// Handler serves the verbs; the engine implements it.
type Handler interface {
	// Do serves one request. A returned error wraps an api sentinel (api.Code(err) gives the wire code).
	Do(ctx context.Context, req api.Request) (api.Response, error)
	// Watch returns a snapshot (Status "tree_watching", with Nodes) and a stream of events until ctx ends.
	Watch(ctx context.Context, treeID string) (api.Response, <-chan api.Event, error)
}

// Execer is a Handler that serves tree_exec (the engine does): Exec runs
// the command and sends its output to out as it comes. tree_exec on a
// Handler without it fails with api.ErrNotSupported.
type Execer interface {
	Exec(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (api.ExecExit, error)
}

// ImageBuilder is a Handler that serves image_build (the daemon does):
// progress sends one line of the build's progress to the client.
// image_build on a Handler without it fails with api.ErrNotSupported.
type ImageBuilder interface {
	BuildImage(ctx context.Context, req api.Request, progress func(string) error) (api.Response, error)
}

// DefaultMaxLineBytes bounds one request line.
const DefaultMaxLineBytes = 1 << 20

// DefaultMaxPendingLineBytes bounds the bytes buffered for incomplete
// request lines across all connections (see Config.MaxPendingLineBytes).
const DefaultMaxPendingLineBytes = 64 << 20

// StatusEvent is the status of a streamed watch event line.
const StatusEvent = api.StatusEvent

// Config configures a Server. Handler is required; the rest have defaults.
type Config struct {
	// Path is the socket Run listens on.
	Path string
	// AllowUIDs, if non-nil, makes the socket mode 0666 and admits only
	// these uids (plus root and the daemon's own uid). Nil means mode 0600.
	AllowUIDs []int
	Handler   Handler
	// Metrics counts requests and times them; nil records nothing.
	Metrics *metrics.Metrics
	// Audit gets one line per request (its verb, the peer's uid, the
	// outcome); nil keeps none. The daemon shares one with the HTTP face.
	Audit *audit.Log
	// Logger logs recovered panics and accept errors; nil discards.
	Logger *slog.Logger
	// MaxLineBytes bounds a request line; 0 means DefaultMaxLineBytes.
	MaxLineBytes int
	// MaxPendingLineBytes bounds the bytes buffered for incomplete lines
	// (a line longer than the 4 KiB read buffer, gathered until its
	// newline) across all connections; 0 means DefaultMaxPendingLineBytes.
	// A connection whose partial line would take the total past it gets
	// one "limit" error line and is closed. It must be at least
	// MaxLineBytes, so that one line of the largest size can be read.
	MaxPendingLineBytes int64
	// MaxConns bounds the connections served at once, MaxConnsPerUID those
	// of one peer uid; past either a new connection gets one "limit" error
	// line and is closed. 0 means the default of DefaultLimits, derived
	// from RLIMIT_NOFILE so that a reserve of descriptors is always left
	// to the FUSE servers and the stores.
	MaxConns, MaxConnsPerUID int
	// IdleTimeout closes a connection that has had no request in flight
	// and no watch for this long, with a "limit" error line (a request
	// line must also arrive within it, and a reply be taken within it).
	// 0 means DefaultIdleTimeout; negative, never.
	IdleTimeout time.Duration
}

// Server serves the JSON-lines protocol.
type Server struct {
	cfg     Config
	lim     Limits
	log     *slog.Logger
	pending budget // bytes buffered for incomplete lines, all connections
}

// New validates cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Handler == nil {
		return nil, fmt.Errorf("lineapi: Config.Handler is required")
	}
	if cfg.MaxLineBytes < 0 {
		return nil, fmt.Errorf("lineapi: Config.MaxLineBytes %d is negative", cfg.MaxLineBytes)
	}
	if cfg.MaxLineBytes == 0 {
		cfg.MaxLineBytes = DefaultMaxLineBytes
	}
	if cfg.MaxPendingLineBytes == 0 {
		cfg.MaxPendingLineBytes = max(DefaultMaxPendingLineBytes, int64(cfg.MaxLineBytes))
	}
	if cfg.MaxPendingLineBytes < int64(cfg.MaxLineBytes) {
		return nil, fmt.Errorf("lineapi: Config.MaxPendingLineBytes %d is below MaxLineBytes %d", cfg.MaxPendingLineBytes, cfg.MaxLineBytes)
	}
	if cfg.MaxConns < 0 || cfg.MaxConnsPerUID < 0 {
		return nil, fmt.Errorf("lineapi: Config.MaxConns %d and MaxConnsPerUID %d must not be negative", cfg.MaxConns, cfg.MaxConnsPerUID)
	}
	nofile, err := NoFile()
	if err != nil {
		return nil, err
	}
	lim := DefaultLimits(nofile, len(cfg.AllowUIDs))
	if cfg.MaxConns > 0 {
		lim.MaxConns, lim.MaxConnsPerUID = cfg.MaxConns, cfg.MaxConns
		if cfg.AllowUIDs != nil {
			lim.MaxConnsPerUID = max(cfg.MaxConns/2, 1)
		}
		lim.Reserve = max(int(nofile)-cfg.MaxConns, 0)
	}
	if cfg.MaxConnsPerUID > 0 {
		lim.MaxConnsPerUID = min(cfg.MaxConnsPerUID, lim.MaxConns)
	}
	if cfg.IdleTimeout != 0 {
		lim.IdleTimeout = cfg.IdleTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, lim: lim, log: log, pending: budget{max: cfg.MaxPendingLineBytes}}, nil
}

// PendingLineBytes is how many bytes the server holds now for incomplete
// request lines, across all connections (at most MaxPendingLineBytes).
func (s *Server) PendingLineBytes() int64 { return s.pending.used.Load() }

// Limits returns the connection limits the server enforces.
func (s *Server) Limits() Limits { return s.lim }

// Run listens on Config.Path and serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	if s.cfg.Path == "" {
		return fmt.Errorf("lineapi: Config.Path is required to Run")
	}
	ln, err := Listen(s.cfg.Path, s.cfg.AllowUIDs)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}

// Serve accepts connections on ln until ctx ends, then closes ln and every
// connection and returns nil once all of them are done. It returns an error
// if ln fails for another reason.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	cs := newConns(s.lim)
	sctx, scancel := context.WithCancel(ctx)
	defer scancel() // before wg.Wait: the scavenger ends with the accept loop
	wg.Go(func() { cs.scavenge(sctx) })
	sp := newSpare()
	defer sp.free()
	backoff := time.Duration(0)
	var refused int       // connections refused since the last log line
	var lastLog time.Time // of a refusal or an accept error
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("lineapi: listener closed: %w", err)
			}
			if outOfFiles(err) {
				s.drainOne(ln, sp)
			}
			// Out of fds and the like: back off as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if time.Since(lastLog) >= time.Second {
				s.log.Warn("lineapi: accept", "err", err, "retry_in", backoff, "open", cs.open())
				lastLog = time.Now()
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		uid, known := connUID(c)
		if reason, err := cs.admit(uid, known); err != nil {
			s.cfg.Metrics.Limited(reason) // counted before the client can read why
			refuse(c, err)
			if refused++; time.Since(lastLog) >= time.Second {
				s.log.Warn("lineapi: refusing connections", "refused", refused, "last", err)
				refused, lastLog = 0, time.Now()
			}
			continue
		}
		s.cfg.Metrics.Conns(1)
		wg.Go(func() {
			defer s.cfg.Metrics.Conns(-1)
			defer cs.release(uid, known)
			s.serveConn(ctx, c)
		})
	}
}

// drainOne, out of descriptors, frees the spare one to accept a waiting
// connection and refuse it, then takes the spare back: the client learns
// why at once, and the backlog drains instead of the accept failing again
// and again while clients hang.
func (s *Server) drainOne(ln net.Listener, sp *spare) {
	dl, ok := ln.(interface{ SetDeadline(time.Time) error })
	if !ok || !sp.free() {
		return
	}
	defer sp.take()
	dl.SetDeadline(time.Now().Add(10 * time.Millisecond)) // never wait for a new one
	defer dl.SetDeadline(time.Time{})
	if c, err := ln.Accept(); err == nil {
		s.cfg.Metrics.Limited(metrics.LimitFDs)
		refuse(c, api.Errorf(api.ErrLimit, "arbord: out of file descriptors; retry later"))
	}
}

func (s *Server) serveConn(ctx context.Context, c net.Conn) {
	if uc, ok := c.(*net.UnixConn); ok {
		// The requester's credentials go with every request (paths are
		// checked against them); without them nothing is served.
		cred, err := PeerCred(uc)
		if err != nil {
			b, _ := json.Marshal(errorResponse(fmt.Errorf("peer credentials unavailable: %w: %w", err, api.ErrAuth)))
			c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			c.Write(append(b, '\n'))
			c.Close()
			return
		}
		ctx = context.WithValue(ctx, peerKey{}, cred.UID)
		ctx = access.WithCred(ctx, cred)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { c.Close() }) // unblocks reads and writes at shutdown
	defer stop()
	// A small read buffer (a longer line is gathered by readLine) and a
	// write buffer only while a reply is being written: an idle connection
	// holds 4 KiB besides its goroutine, so a flood of them costs little.
	sc := &conn{s: s, nc: c, idle: s.lim.IdleTimeout, br: bufio.NewReaderSize(c, 4<<10)}
	defer sc.wg.Wait() // after c.Close below (defers run last-in first-out)
	defer sc.dropWriter()
	defer c.Close()
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("lineapi: connection panic", "panic", p, "stack", string(debug.Stack()))
		}
	}()
	sc.serve(ctx)
}

type peerKey struct{}

// Peer returns the uid of the socket peer whose request ctx belongs to
// (SO_PEERCRED), if the request came over a Unix socket. The peer's full
// credentials are in ctx too (access.FromContext).
func Peer(ctx context.Context) (uid uint32, ok bool) {
	uid, ok = ctx.Value(peerKey{}).(uint32)
	return uid, ok
}

// conn is one connection's state; only its serving goroutine touches br
// and bw, except the watch reader, which takes br once serve stops reading.
type conn struct {
	s    *Server
	nc   net.Conn
	idle time.Duration // <0: no idle timeout
	br   *bufio.Reader
	bw   *bufio.Writer  // nil unless a reply is being written (see writer)
	wg   sync.WaitGroup // the watch reader
}

// writers holds the write buffers of the connections not writing.
var writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 32<<10) }}

// writer returns the connection's write buffer, taking one if need be.
func (c *conn) writer() *bufio.Writer {
	if c.bw == nil {
		c.bw = writers.Get().(*bufio.Writer)
		c.bw.Reset(c.nc)
	}
	return c.bw
}

// flush sends what is buffered and gives the buffer back.
func (c *conn) flush() error {
	if c.bw == nil {
		return nil
	}
	if err := c.bw.Flush(); err != nil {
		return err
	}
	c.dropWriter()
	return nil
}

func (c *conn) dropWriter() {
	if c.bw != nil {
		c.bw.Reset(nil)
		writers.Put(c.bw)
		c.bw = nil
	}
}

// deadline sets the connection's read or write deadline to the idle
// timeout from now (or none when it has none).
func (c *conn) deadline(set func(time.Time) error) {
	if c.idle > 0 {
		set(time.Now().Add(c.idle))
	}
}

// serve reads requests and writes replies until the stream ends.
func (c *conn) serve(ctx context.Context) {
	for {
		// Nothing is in flight while serve waits here: the idle timeout
		// runs (a request line must arrive whole within it).
		c.deadline(c.nc.SetReadDeadline)
		line, err := readLine(c.br, c.s.cfg.MaxLineBytes, &c.s.pending)
		if errors.Is(err, errPendingBudget) {
			// Waiting for room would not free any: the lines that hold it
			// wait on their own clients. Refuse this one and go on.
			c.s.cfg.Metrics.Limited(metrics.LimitLineBudget)
			c.write(errorResponse(api.Errorf(api.ErrLimit, "arbord: the daemon holds %d bytes of incomplete request lines (its limit); closing this connection with its partial line, retry later", c.s.pending.max)))
			c.flush()
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			// Whatever part of a line came is not served: say why.
			c.write(errorResponse(api.Errorf(api.ErrLimit, "arbord: closing the connection after %v with no request (the idle timeout); reconnect to go on", c.idle)))
			c.flush()
			c.s.cfg.Metrics.Limited(metrics.LimitIdle)
			return
		}
		if errors.Is(err, errLineTooLong) {
			c.s.record(ctx, api.Request{Op: metrics.OpUnknown}, api.CodeBadRequest, time.Now())
			if c.reply(errorResponse(api.Errorf(api.ErrBadRequest, "request line longer than %d bytes", c.s.cfg.MaxLineBytes))) != nil {
				return
			}
			continue
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if !c.handle(ctx, line) {
				return
			}
		}
		if err != nil { // io.EOF or a read error: the last partial line was served above
			return
		}
	}
}

// handle serves one line and reports whether the connection goes on.
func (c *conn) handle(ctx context.Context, line []byte) bool {
	start := time.Now()
	req, err := Decode(line)
	if err != nil {
		c.s.record(ctx, api.Request{Op: opLabel(req.Op)}, api.CodeBadRequest, start)
		return c.reply(errorResponse(err)) == nil
	}
	if req.Op == api.OpTreeWatch {
		return c.watch(ctx, req, start)
	}
	if req.Input && req.Op != api.OpFileWrite && (req.Op != api.OpTreeExec || req.Detach) {
		c.s.record(ctx, req, api.CodeBadRequest, start)
		return c.reply(errorResponse(fmt.Errorf("%s: %w", req.Op, errNoInput))) == nil
	}
	if req.Op == api.OpTreeExec && !req.Detach {
		return c.exec(ctx, req, start)
	}
	if req.Op == api.OpExecLogs {
		return c.logs(ctx, req, start)
	}
	if f, ok := c.s.cfg.Handler.(Filer); ok {
		switch {
		case req.Op == api.OpFileRead:
			return c.fileRead(ctx, f, req, start)
		case req.Op == api.OpFileWrite && req.Input:
			return c.fileWrite(ctx, f, req, start)
		}
	}
	if req.Op == api.OpImageBuild {
		return c.imageBuild(ctx, req, start)
	}
	resp := c.s.do(ctx, req, start)
	return c.reply(resp) == nil
}

// do calls the handler, recovering a panic, and records the request.
func (s *Server) do(ctx context.Context, req api.Request, start time.Time) api.Response {
	resp, err := s.call(ctx, req)
	code := metrics.CodeOK
	if err != nil {
		resp = errorResponse(err)
		code = resp.Code
	} else if resp.Status == "" {
		resp.Status = api.StatusOK
	}
	s.record(ctx, req, code, start)
	return resp
}

// record counts and times one request (code metrics.CodeOK or its error
// code) and writes its audit line.
func (s *Server) record(ctx context.Context, req api.Request, code string, start time.Time) {
	d := time.Since(start)
	s.cfg.Metrics.Observe(metrics.FaceLine, req.Op, code, d)
	if s.cfg.Audit == nil {
		return
	}
	e := audit.Entry{Face: audit.FaceLine, DurationUS: d.Microseconds(), Op: req.Op, Tree: req.TreeID, Node: req.NodeID}
	if e.Node == "" {
		e.Node = req.SourceID
	}
	if strings.HasPrefix(req.Op, "file_") {
		e.File = req.Path
	}
	if code != metrics.CodeOK {
		e.Code = code
	}
	if uid, ok := Peer(ctx); ok {
		e.UID = &uid
	}
	s.cfg.Audit.Write(e)
}

func (s *Server) call(ctx context.Context, req api.Request) (resp api.Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("lineapi: handler panic", "op", req.Op, "panic", p, "stack", string(debug.Stack()))
			err = api.Errorf(api.ErrInternal, "%s: the daemon failed serving this request", req.Op)
		}
	}()
	return s.cfg.Handler.Do(ctx, req)
}

func (s *Server) callWatch(ctx context.Context, tree string) (snap api.Response, ch <-chan api.Event, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("lineapi: watch panic", "tree", tree, "panic", p, "stack", string(debug.Stack()))
			err = api.Errorf(api.ErrInternal, "tree_watch: the daemon failed serving this request")
		}
	}()
	return s.cfg.Handler.Watch(ctx, tree)
}

// watch streams a tree's events; it reports whether the connection goes on
// in request mode (only after a refused watch).
func (c *conn) watch(ctx context.Context, req api.Request, start time.Time) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	snap, events, err := c.s.callWatch(ctx, req.TreeID)
	if err != nil {
		resp := errorResponse(err)
		c.s.record(ctx, req, resp.Code, start)
		return c.reply(resp) == nil
	}
	c.s.record(ctx, req, metrics.CodeOK, start)
	if snap.Status == "" {
		snap.Status = api.StatusWatching
	}
	if c.reply(snap) != nil {
		return false
	}
	// The client ends the stream by closing: read (and drop) its input. A
	// watch is never idle.
	c.nc.SetReadDeadline(time.Time{})
	c.wg.Go(func() {
		io.Copy(io.Discard, c.br)
		cancel()
	})
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, ok := <-events:
			if !ok {
				return false
			}
			if err := c.write(api.Response{Status: StatusEvent, Event: &ev}); err != nil {
				return false
			}
			if len(events) == 0 {
				if c.flush() != nil {
					return false
				}
			}
		}
	}
}

// exec streams a tree_exec: one api.StatusExecOutput line per chunk of
// output, flushed as it comes, then one api.StatusExecExit line (or an
// error line); the connection goes on in request mode after it. A client
// that stops reading ends the command at its next chunk (the write fails
// within the idle timeout).
func (c *conn) exec(ctx context.Context, req api.Request, start time.Time) bool {
	x, ok := c.s.cfg.Handler.(Execer)
	if !ok {
		c.s.record(ctx, req, api.CodeNotSupported, start)
		return c.reply(errorResponse(api.Errorf(api.ErrNotSupported, "tree_exec: not served here"))) == nil
	}
	var werr error
	out := c.output(&werr)
	var exit api.ExecExit
	var err error
	if req.Input {
		// The input lines feed the command's stdin (and a tty's size) as
		// they come, through a pipe: a command that does not read holds
		// the client back. The connection ends with the exec: its input
		// may never reach EOF (a terminal).
		ix, ok := x.(InputExecer)
		if !ok {
			c.s.record(ctx, req, api.CodeNotSupported, start)
			return c.reply(errorResponse(api.Errorf(api.ErrNotSupported, "tree_exec: input not served here"))) == nil
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		pr, pw := io.Pipe()
		resize := make(chan api.Input)
		in := &inputReader{c: c, ctx: ctx, resize: resize}
		c.nc.SetReadDeadline(time.Time{})
		c.wg.Go(func() {
			_, err := io.Copy(pw, in)
			pw.CloseWithError(err)
		})
		defer c.nc.Close() // ends the input reader
		defer pr.Close()
		exit, err = c.s.callExec(ctx, execFunc(func(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (api.ExecExit, error) {
			return ix.ExecInput(ctx, req, pr, resize, out)
		}), req, out)
		if werr == nil {
			c.finishExec(ctx, req, exit, err, start)
		}
		return false
	}
	exit, err = c.s.callExec(ctx, x, req, out)
	if werr != nil {
		return false
	}
	return c.finishExec(ctx, req, exit, err, start)
}

// execFunc is an Execer made of a function.
type execFunc func(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (api.ExecExit, error)

func (f execFunc) Exec(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (api.ExecExit, error) {
	return f(ctx, req, out)
}

// finishExec writes an exec's last line and records it.
func (c *conn) finishExec(ctx context.Context, req api.Request, exit api.ExecExit, err error, start time.Time) bool {
	resp := api.Response{Status: api.StatusExecExit, TreeID: req.TreeID, NodeID: req.NodeID, Exit: &exit}
	code := metrics.CodeOK
	if err != nil {
		resp = errorResponse(err)
		code = resp.Code
	}
	c.s.record(ctx, req, code, start)
	if req.Input {
		// The input reader owns br: no peek for pipelined requests.
		return c.write(resp) == nil && c.flush() == nil
	}
	return c.reply(resp) == nil
}

func (s *Server) callExec(ctx context.Context, x Execer, req api.Request, out func(api.ExecOutput) error) (exit api.ExecExit, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("lineapi: exec panic", "panic", p, "stack", string(debug.Stack()))
			err = api.Errorf(api.ErrInternal, "tree_exec: the daemon failed serving this request")
		}
	}()
	return x.Exec(ctx, req, out)
}

// imageBuild streams an image_build's progress lines, then its reply.
func (c *conn) imageBuild(ctx context.Context, req api.Request, start time.Time) bool {
	b, ok := c.s.cfg.Handler.(ImageBuilder)
	if !ok {
		c.s.record(ctx, req, api.CodeNotSupported, start)
		return c.reply(errorResponse(api.Errorf(api.ErrNotSupported, "image_build: not served here"))) == nil
	}
	var werr error
	progress := func(line string) error {
		if werr == nil {
			if werr = c.write(api.Response{Status: api.StatusImageProgress, Progress: line}); werr == nil {
				werr = c.flush()
			}
		}
		return werr
	}
	resp, err := func() (resp api.Response, err error) {
		defer func() {
			if p := recover(); p != nil {
				c.s.log.Error("lineapi: image_build panic", "panic", p, "stack", string(debug.Stack()))
				err = api.Errorf(api.ErrInternal, "image_build: the daemon failed serving this request")
			}
		}()
		return b.BuildImage(ctx, req, progress)
	}()
	code := metrics.CodeOK
	if err != nil {
		resp = errorResponse(err)
		code = resp.Code
	}
	c.s.record(ctx, req, code, start)
	if werr != nil {
		return false
	}
	return c.reply(resp) == nil
}

// reply writes resp, flushing unless another complete request is already
// buffered (pipelined requests are answered in one write).
func (c *conn) reply(resp api.Response) error {
	if err := c.write(resp); err != nil {
		return err
	}
	if n := c.br.Buffered(); n > 0 {
		if b, _ := c.br.Peek(n); bytes.IndexByte(b, '\n') >= 0 {
			return nil
		}
	}
	return c.flush()
}

func (c *conn) write(resp api.Response) error {
	b, err := json.Marshal(resp)
	if err != nil { // cannot happen with api types; answer something well-formed
		b, _ = json.Marshal(errorResponse(fmt.Errorf("encoding reply: %w: %w", err, api.ErrInternal)))
	}
	b = append(b, '\n')
	// A reply the client does not take within the idle timeout ends the
	// connection: a client that never reads must not hold a slot forever.
	c.deadline(c.nc.SetWriteDeadline)
	_, err = c.writer().Write(b)
	return err
}

func errorResponse(err error) api.Response {
	return api.Response{Status: api.StatusError, Code: api.Code(err), Message: err.Error()}
}

var (
	errLineTooLong   = errors.New("line too long")
	errPendingBudget = errors.New("pending line budget exhausted")
)

// budget counts bytes against a maximum, for any goroutine.
type budget struct {
	max  int64
	used atomic.Int64
}

// reserve takes n bytes, or reports false (taking none) if that would pass max.
func (b *budget) reserve(n int64) bool {
	for {
		u := b.used.Load()
		if u+n > b.max {
			return false
		}
		if b.used.CompareAndSwap(u, u+n) {
			return true
		}
	}
}

func (b *budget) release(n int64) { b.used.Add(-n) }

// readLine returns the next line without its newline. A line over maxLen bytes
// is consumed up to its newline and reported as errLineTooLong. At the end
// of input it returns the last unterminated line (if any) with the error.
//
// A line that fits the reader's buffer costs nothing more. A longer one is
// gathered in a buffer whose capacity is reserved from pending while it
// grows (and given back when readLine returns); if pending has no room for
// the next growth, readLine fails with errPendingBudget.
func readLine(br *bufio.Reader, maxLen int, pending *budget) (line []byte, err error) {
	var long []byte
	defer func() { pending.release(int64(cap(long))) }()
	for {
		frag, err := br.ReadSlice('\n')
		if err == nil && long == nil {
			if len(frag)-1 > maxLen {
				return nil, errLineTooLong
			}
			return frag[:len(frag)-1], nil
		}
		n := len(long) + len(frag)
		if err == nil {
			n-- // the newline
		}
		if n > maxLen {
			// Too long: discard the rest of the line. A read error is
			// seen again by the next call.
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			return nil, errLineTooLong
		}
		if need := len(long) + len(frag); need > cap(long) {
			// Grow by doubling, but never past what the longest line needs.
			c := min(max(2*cap(long), need), maxLen+1)
			if !pending.reserve(int64(c - cap(long))) {
				return nil, errPendingBudget
			}
			grown := make([]byte, len(long), c) // its capacity is what is reserved
			copy(grown, long)
			long = grown
		}
		long = append(long, frag...)
		switch {
		case err == nil:
			// The caller serves the line after the deferred release: the
			// budget bounds lines still waiting for their newline.
			return long[:len(long)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return long, err
		}
	}
}

// Decode parses one request line strictly. The error wraps api.ErrBadRequest
// and says what is wrong; the returned request carries the op if one was read.
func Decode(line []byte) (api.Request, error) {
	var req api.Request
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, api.Errorf(api.ErrBadRequest, "invalid request: %s", jsonProblem(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return req, api.Errorf(api.ErrBadRequest, "invalid request: data after the JSON object (one object per line)")
	}
	if req.Op == "" {
		return req, api.Errorf(api.ErrBadRequest, `invalid request: no "op"`)
	}
	if !known(req.Op) {
		return req, api.Errorf(api.ErrBadRequest, "unknown op %q", truncate(req.Op, 64))
	}
	return req, nil
}

func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("not valid JSON at byte %d: %v", se.Offset, se)
	case errors.As(err, &te):
		if te.Field != "" {
			return fmt.Sprintf("field %q must be %s, not %s", te.Field, te.Type, te.Value)
		}
		return fmt.Sprintf("a request is a JSON object, not %s", te.Value)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "truncated JSON"
	}
	return err.Error()
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// known reports whether op is in api's verb table: only those reach the
// Handler, which bounds the op label of the metrics and keeps junk away
// from the engine.
func known(op string) bool {
	_, ok := api.Lookup(op)
	return ok
}

func opLabel(op string) string {
	if known(op) {
		return op
	}
	return metrics.OpUnknown
}
