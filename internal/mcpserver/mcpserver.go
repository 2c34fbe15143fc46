package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/debug"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/metrics"
)

// Handler serves the verbs: the daemon's router in arbord, the Go client
// of the daemon's socket in `arbor mcp`.
type Handler interface {
	// Do serves one request; a returned error wraps an api sentinel.
	Do(ctx context.Context, req api.Request) (api.Response, error)
	// Watch returns a snapshot of the tree and its events until ctx ends.
	Watch(ctx context.Context, treeID string) (api.Response, <-chan api.Event, error)
}

// CodeNotSupported is the tool error code of a tool this daemon cannot
// serve (exec and files without a sandbox backend): api's.
const CodeNotSupported = api.CodeNotSupported

// MetaCode is the _meta key of a tool error's wire code.
const MetaCode = "arbor.dev/code"

// Defaults.
const (
	// DefaultSessionTimeout closes an HTTP session idle this long.
	DefaultSessionTimeout = 30 * time.Minute
	// Name is the implementation name the server reports.
	Name = "arbor"
)

// Config configures New. Handler is required.
type Config struct {
	Handler Handler
	// Version is reported in the initialize reply.
	Version string
	// Logger logs recovered panics; nil discards.
	Logger *slog.Logger
	// Metrics counts the verbs the tools call (face "mcp"); nil counts none.
	Metrics *metrics.Metrics
	// SessionTimeout closes an HTTP session that has sent nothing this
	// long; 0 means DefaultSessionTimeout.
	SessionTimeout time.Duration
}

// Server is the MCP face. Its HTTPHandler serves streamable HTTP; Serve
// serves one transport (stdio). Close ends the watches it holds.
type Server struct {
	cfg  Config
	log  *slog.Logger
	mcp  *mcp.Server
	self access.Cred // what the verbs are checked as (see call)

	life   context.Context // the watches' lifetime
	cancel context.CancelFunc
	wg     sync.WaitGroup // the watch goroutines

	mu      sync.Mutex        // guards watches
	watches map[string]*watch // by resource URI
}

// New validates cfg and builds the server with its tools and resources.
func New(cfg Config) (*Server, error) {
	if cfg.Handler == nil {
		return nil, fmt.Errorf("mcpserver: Config.Handler is required")
	}
	if cfg.SessionTimeout < 0 {
		return nil, fmt.Errorf("mcpserver: negative SessionTimeout")
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, self: access.Self(), watches: map[string]*watch{}}
	s.life, s.cancel = context.WithCancel(context.Background())
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: Name, Title: "Arbor", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: instructions,
		// No logging capability: nothing is logged to clients.
		Capabilities:       &mcp.ServerCapabilities{},
		SubscribeHandler:   s.subscribe,
		UnsubscribeHandler: s.unsubscribe,
	})
	s.mcp.AddReceivingMiddleware(codeMeta)
	s.addTools()
	s.addResources()
	return s, nil
}

const instructions = `Arbor holds branchable environments as trees of nodes. A node is one state of a directory; fork makes children that each see the source's files as of the fork (copy-on-write) and are isolated from each other. Explore in children, commit the one that worked (its files become its parent's; its siblings from the same fork point become stale), abort or prune the rest. Every tool takes the tree_id and node ids that earlier tools returned. A failed tool returns an error whose text starts with a code: not_found, stale, budget, protected, bad_state, bad_request, no_space, not_supported, ... Read arbor://trees/{tree_id}/nodes for a tree's nodes, and subscribe to it to hear when they change.`

// Serve serves one session on t (stdio for `arbor mcp`) until the client
// leaves or ctx ends.
func (s *Server) Serve(ctx context.Context, t mcp.Transport) error {
	return s.mcp.Run(ctx, t)
}

// HTTPHandler serves the streamable HTTP transport (mount it at /mcp).
// Authentication is the mounting face's job.
func (s *Server) HTTPHandler() http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.mcp }, &mcp.StreamableHTTPOptions{
		SessionTimeout: s.cfg.SessionTimeout,
		Logger:         s.log,
	})
}

// Close ends every watch the server holds and waits for them. Sessions
// in flight keep working; a later subscription opens a watch no more.
func (s *Server) Close() error {
	s.mu.Lock() // a subscription adds to wg under mu, only before this
	s.cancel()
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// call sends one request to the Handler. The HTTP transport's only
// credential is the face's bearer token, so paths a request names are
// checked as the daemon itself, as on the HTTP face; over stdio the
// daemon checks the socket peer's credentials and this value stays in
// this process.
func (s *Server) call(ctx context.Context, req api.Request) (resp api.Response, err error) {
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("mcpserver: handler panic", "op", req.Op, "panic", p, "stack", string(debug.Stack()))
			err = api.Errorf(api.ErrInternal, "%s: the daemon failed serving this request", req.Op)
		}
		code := metrics.CodeOK
		if err != nil {
			code = api.Code(err)
		}
		s.cfg.Metrics.Observe(metrics.FaceMCP, req.Op, code, time.Since(start))
	}()
	return s.cfg.Handler.Do(access.WithCred(ctx, s.self), req)
}

// observe runs a streamed verb (exec, a file's read) as call runs Do:
// checked as the server, counted, a panic recovered.
func (s *Server) observe(ctx context.Context, op string, fn func(ctx context.Context) error) (err error) {
	start := time.Now()
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("mcpserver: handler panic", "op", op, "panic", p, "stack", string(debug.Stack()))
			err = api.Errorf(api.ErrInternal, "%s: the daemon failed serving this request", op)
		}
		code := metrics.CodeOK
		if err != nil && !errors.Is(err, errEnough) {
			code = api.Code(err)
		}
		s.cfg.Metrics.Observe(metrics.FaceMCP, op, code, time.Since(start))
	}()
	return fn(access.WithCred(ctx, s.self))
}

// toolError is a verb's failure as a tool reports it.
type toolError struct {
	code string
	err  error
}

func (e *toolError) Error() string { return e.code + ": " + e.err.Error() }
func (e *toolError) Unwrap() error { return e.err }

// asToolError gives err its wire code.
func asToolError(err error) error {
	var te *toolError
	if errors.As(err, &te) {
		return err
	}
	return &toolError{code: api.Code(err), err: err}
}

// notSupported is the error of a tool no backend serves here.
func notSupported(tool string) error {
	return &toolError{code: CodeNotSupported, err: fmt.Errorf("%s: this server's handler does not stream it (the daemon's and the socket's do)", tool)}
}

// codeMeta copies a tool error's code into the result's _meta, so a client
// can branch on the code without parsing text.
func codeMeta(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if r, ok := res.(*mcp.CallToolResult); ok && err == nil && r.IsError {
			code := api.CodeBadRequest // the SDK's own failures: arguments that do not fit the schema
			var te *toolError
			if errors.As(r.GetError(), &te) {
				code = te.code
			} else if len(r.Content) == 1 {
				if tc, ok := r.Content[0].(*mcp.TextContent); ok {
					tc.Text = code + ": " + tc.Text
				}
			}
			if r.Meta == nil {
				r.Meta = mcp.Meta{}
			}
			r.Meta[MetaCode] = code
		}
		return res, err
	}
}

// Socket is a Handler over the daemon's socket, for `arbor mcp`: the
// daemon owns the stores, so a stdio server in another process reaches
// the engine through the socket face (and the daemon checks that
// process's credentials there).
type Socket struct{ Client *client.Client }

// Do sends one request over the socket.
func (h Socket) Do(ctx context.Context, req api.Request) (api.Response, error) {
	return h.Client.Do(ctx, req)
}

// Exec runs a command over the socket, its output streamed.
func (h Socket) Exec(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (api.ExecExit, error) {
	return h.Client.Exec(ctx, req, out)
}

// ReadFile reads a node's file over the socket, in chunks.
func (h Socket) ReadFile(ctx context.Context, treeID, nodeID, path string, w io.Writer) (api.FileInfo, error) {
	return h.Client.ReadFile(ctx, treeID, nodeID, path, w)
}

// Watch opens a watch over the socket.
func (h Socket) Watch(ctx context.Context, treeID string) (api.Response, <-chan api.Event, error) {
	return h.Client.WatchSnapshot(ctx, treeID)
}
