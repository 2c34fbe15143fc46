package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"golang.org/x/net/netutil"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
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

// Defaults.
const (
	DefaultAddr            = "127.0.0.1:8890"
	DefaultMaxBodyBytes    = 1 << 20
	DefaultShutdownTimeout = 5 * time.Second
)

// Config configures a Server. Handler is required.
type Config struct {
	// Addr is where Run listens; empty means DefaultAddr.
	Addr string
	// Token is required as "Authorization: Bearer <Token>" on every route
	// but /healthz. Required: the HTTP face never serves without one.
	Token   string
	Handler Handler
	// Metrics counts requests and serves /metrics; nil makes a private one.
	Metrics *metrics.Metrics
	// Audit gets one line per request; nil keeps none. The daemon shares
	// one with the socket face.
	Audit *audit.Log
	// Logger logs recovered panics and audit write failures; nil discards.
	Logger *slog.Logger
	// MaxBodyBytes bounds a request body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// ShutdownTimeout bounds how long Serve waits for verbs in flight
	// after ctx ends; 0 means DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Version is reported by GET /v1/version when the Handler's ping
	// reply has none.
	Version string
	// MaxConns caps the connections served at once; past it new ones wait
	// in the kernel's listen backlog, holding no descriptor of the daemon
	// (its mounts and stores keep theirs). 0 means DefaultMaxConns.
	MaxConns int
	// MCP serves /mcp behind the token (the MCP server's streamable HTTP);
	// UI serves /ui/, which alone with /healthz needs no token (the web
	// view's static files: the page asks for the token). nil serves none.
	MCP, UI http.Handler
}

// DefaultMaxConns is the HTTP face's default connection cap.
const DefaultMaxConns = 512

// Server is the HTTP face. It is an http.Handler.
type Server struct {
	cfg   Config
	log   *slog.Logger
	mux   *http.ServeMux
	token [sha256.Size]byte
	self  access.Cred // the daemon's credentials: what HTTP requests are checked as
}

// New validates cfg and returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Handler == nil {
		return nil, fmt.Errorf("httpapi: Config.Handler is required")
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if strings.ContainsFunc(cfg.Token, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return nil, fmt.Errorf("httpapi: Config.Token contains whitespace or control characters")
	}
	if _, err := IsLoopback(cfg.Addr); err != nil {
		return nil, err
	}
	if cfg.Token == "" {
		return nil, fmt.Errorf("httpapi: refusing to serve %q without a token (Config.Token)", cfg.Addr)
	}
	if cfg.MaxBodyBytes < 0 || cfg.ShutdownTimeout < 0 || cfg.MaxConns < 0 {
		return nil, fmt.Errorf("httpapi: negative MaxBodyBytes, ShutdownTimeout or MaxConns")
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.Metrics == nil {
		m, err := metrics.New(metrics.Config{})
		if err != nil {
			return nil, err
		}
		cfg.Metrics = m
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, mux: http.NewServeMux(), self: access.Self()}
	s.token = sha256.Sum256([]byte(cfg.Token))
	for _, rt := range s.routes() {
		s.mux.Handle(rt.method+" "+rt.pattern, rt.h)
	}
	if cfg.MCP != nil {
		s.mux.Handle("/mcp", untilStop(cfg.MCP))
	}
	if cfg.UI != nil {
		s.mux.Handle("GET /ui/", cfg.UI)
	}
	return s, nil
}

// IsLoopback reports whether a listen address binds only loopback
// interfaces. An empty host or 0.0.0.0 binds all; a name other than
// localhost could resolve anywhere.
func IsLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, fmt.Errorf("httpapi: listen address %q: %w", addr, err)
	}
	if strings.EqualFold(host, "localhost") {
		return true, nil
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback(), nil
}

// OpenAuditLog opens (creating with mode 0600) an append-only audit log
// (audit.Open).
func OpenAuditLog(path string) (*os.File, error) { return audit.Open(path) }

// Addr returns the configured listen address.
func (s *Server) Addr() string { return s.cfg.Addr }

// Run listens on Config.Addr and serves until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("httpapi: %w", err)
	}
	return s.Serve(ctx, ln)
}

type stopKey struct{}

// untilStop ends h's requests when the server shuts down: an MCP client's
// open stream would otherwise hold Shutdown for its whole timeout.
func untilStop(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if stopping, ok := r.Context().Value(stopKey{}).(context.Context); ok {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			defer context.AfterFunc(stopping, cancel)()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}

// Serve serves on ln until ctx ends; it owns ln. At most Config.MaxConns
// connections are open at once.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	ln = netutil.LimitListener(ln, s.cfg.MaxConns)
	stopping, stop := context.WithCancel(context.Background())
	defer stop()
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		// Verbs run on a context that shutdown does not cancel (they finish
		// in the grace period); watch streams also select on stopping.
		BaseContext: func(net.Listener) context.Context {
			return context.WithValue(context.Background(), stopKey{}, stopping)
		},
	}
	srv.RegisterOnShutdown(stop)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("httpapi: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("httpapi: %w", err)
	}
	// Shutdown does not wait for hijacked or still-running handlers after
	// its timeout; the handlers' goroutines belong to net/http and end
	// once their streams see stopping.
	return nil
}

// recorder captures the status for the audit log and metrics.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	op     string // set by the route (setOp)
	code   string // the error code written, if any
}

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if !r.wrote {
		r.status, r.wrote = http.StatusOK, true
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// ServeHTTP authenticates, routes and audits one request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	r = keepDots(r)
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("httpapi: panic", "method", r.Method, "path", r.URL.Path, "panic", p)
			if !rec.wrote {
				writeError(rec, api.Errorf(api.ErrInternal, "the daemon failed serving this request"))
			}
		}
		s.audit(r, rec, time.Since(start))
	}()
	public := r.URL.Path == "/healthz" ||
		s.cfg.UI != nil && (r.Method == http.MethodGet || r.Method == http.MethodHead) && (r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/"))
	if !public && !s.authorized(r) {
		rec.Header().Set("WWW-Authenticate", `Bearer realm="arbord"`)
		writeError(rec, api.Errorf(api.ErrAuth, "missing or wrong bearer token"))
		s.cfg.Metrics.Observe(metrics.FaceHTTP, metrics.OpUnknown, api.CodeAuth, time.Since(start))
		return
	}
	if h, pattern := s.mux.Handler(r); pattern == "" {
		// No route: let the mux decide 404 or 405 (and Allow), then answer
		// with the envelope.
		probe := &statusProbe{h: http.Header{}}
		h.ServeHTTP(probe, r)
		switch probe.status {
		case http.StatusMethodNotAllowed:
			rec.Header().Set("Allow", probe.h.Get("Allow"))
			writeErrorStatus(rec, http.StatusMethodNotAllowed, api.Errorf(api.ErrBadRequest, "method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, probe.h.Get("Allow")))
		case http.StatusNotFound:
			writeErrorStatus(rec, http.StatusNotFound, api.Errorf(api.ErrNotFound, "no route %s %s", r.Method, r.URL.Path))
		default: // a redirect to a cleaned path
			h.ServeHTTP(rec, r)
			return
		}
		s.cfg.Metrics.Observe(metrics.FaceHTTP, metrics.OpUnknown, api.CodeNotFound, time.Since(start))
		return
	}
	s.mux.ServeHTTP(rec, r)
}

// statusProbe records what the mux's own 404/405 handlers would answer.
type statusProbe struct {
	h      http.Header
	status int
}

func (p *statusProbe) Header() http.Header { return p.h }
func (p *statusProbe) Write(b []byte) (int, error) {
	if p.status == 0 {
		p.status = http.StatusOK
	}
	return len(b), nil
}
func (p *statusProbe) WriteHeader(code int) {
	if p.status == 0 {
		p.status = code
	}
}

func (s *Server) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "bearer ") { // the scheme is case-insensitive
		return false
	}
	tok := h[7:]
	got := sha256.Sum256([]byte(tok))
	return subtle.ConstantTimeCompare(got[:], s.token[:]) == 1
}

func (s *Server) audit(r *http.Request, rec *recorder, d time.Duration) {
	if s.cfg.Audit == nil {
		return
	}
	tree := r.PathValue("tree")
	if tree == "" && r.URL.Path == api.EventsPath {
		tree = r.URL.Query().Get("tree")
	}
	s.cfg.Audit.Write(audit.Entry{
		Face: audit.FaceHTTP, Remote: r.RemoteAddr, Method: r.Method, Path: r.URL.Path,
		Status: rec.status, Code: rec.code, DurationUS: d.Microseconds(),
		Op: rec.op, Tree: tree, Node: r.PathValue("node"), UserAgent: r.UserAgent(),
	})
}

// Status maps an api error code to its HTTP status (the api error table's).
func Status(code string) int { return api.HTTPStatus(code) }

func writeError(w http.ResponseWriter, err error) {
	writeErrorStatus(w, Status(api.Code(err)), err)
}

func writeErrorStatus(w http.ResponseWriter, status int, err error) {
	if rec, ok := w.(*recorder); ok {
		rec.code = api.Code(err)
	}
	writeJSON(w, status, api.Response{Status: api.StatusError, Code: api.Code(err), Message: err.Error()})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(api.Response{Status: api.StatusError, Code: api.CodeInternal, Message: "encoding reply: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
