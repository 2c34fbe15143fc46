package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/metrics"
)

// route is one registered method and pattern.
type route struct {
	method, pattern string
	h               http.Handler
}

// Route is a registered method and path pattern, for tests and docs.
type Route struct{ Method, Pattern string }

// Routes lists the registered routes.
func (s *Server) Routes() []Route {
	var out []Route
	for _, rt := range s.routes() {
		out = append(out, Route{rt.method, rt.pattern})
	}
	return out
}

func (s *Server) routes() []route {
	const node = "/v1/trees/{tree}/nodes/{node}"
	nodeVerb := func(verb, op string) route {
		return route{"POST", node + "/" + verb, s.verb(http.StatusOK, func(r *http.Request, req *api.Request) error {
			req.Op, req.TreeID, req.NodeID = op, r.PathValue("tree"), r.PathValue("node")
			return s.decode(r, &struct{}{})
		})}
	}
	treeVerb := func(method, pattern, op string) route {
		return route{method, pattern, s.verb(http.StatusOK, func(r *http.Request, req *api.Request) error {
			req.Op, req.TreeID = op, r.PathValue("tree")
			return s.decode(r, &struct{}{})
		})}
	}
	return []route{
		{"GET", "/healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, api.Response{Status: api.StatusOK})
		})},
		{"GET", "/metrics", s.cfg.Metrics.Handler()},
		{"GET", "/v1/openapi.json", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(openAPI)
		})},
		{"GET", "/v1/version", s.verb(http.StatusOK, func(r *http.Request, req *api.Request) error {
			req.Op = api.OpPing
			return nil
		})},
		{"POST", "/v1/trees", s.verb(http.StatusCreated, func(r *http.Request, req *api.Request) error {
			var b CreateBody
			req.Op = api.OpTreeCreate
			if err := s.decode(r, &b); err != nil {
				return err
			}
			req.TreeID, req.Base, req.Backend, req.Budget = b.TreeID, b.Base, b.Backend, b.Budget
			return nil
		})},
		{"GET", "/v1/trees", s.verb(http.StatusOK, func(r *http.Request, req *api.Request) error {
			req.Op = api.OpTreeList
			return nil
		})},
		{"GET", "/v1/trees/{tree}", s.verb(http.StatusOK, func(r *http.Request, req *api.Request) error {
			req.Op, req.TreeID = api.OpTreeNodes, r.PathValue("tree")
			return nil
		})},
		treeVerb("DELETE", "/v1/trees/{tree}", api.OpTreeDelete),
		treeVerb("POST", "/v1/trees/{tree}/drop", api.OpTreeDrop),
		treeVerb("POST", "/v1/trees/{tree}/open", api.OpTreeOpen),
		treeVerb("POST", "/v1/trees/{tree}/evict", api.OpTreeEvict),
		{"GET", "/v1/trees/{tree}/watch", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.watch(w, r, r.PathValue("tree"))
		})},
		{"GET", "/v1/events", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.watch(w, r, r.URL.Query().Get("tree"))
		})},
		{"POST", node + "/fork", s.verb(http.StatusCreated, func(r *http.Request, req *api.Request) error {
			var b ForkBody
			req.Op, req.TreeID, req.SourceID = api.OpTreeFork, r.PathValue("tree"), r.PathValue("node")
			if err := s.decode(r, &b); err != nil {
				return err
			}
			switch {
			case b.Label != "" && b.Labels != nil:
				return api.Errorf(api.ErrBadRequest, `fork: give "label" or "labels", not both`)
			case b.Labels != nil:
				req.Op, req.Labels = api.OpTreeForkBat, b.Labels
			default:
				req.Label = b.Label
			}
			return nil
		})},
		{"POST", node + "/rollback", s.verb(http.StatusCreated, func(r *http.Request, req *api.Request) error {
			var b RollbackBody
			req.Op, req.TreeID, req.NodeID = api.OpTreeRollback, r.PathValue("tree"), r.PathValue("node")
			if err := s.decode(r, &b); err != nil {
				return err
			}
			req.Label = b.Label
			return nil
		})},
		nodeVerb("commit", api.OpTreeCommit),
		nodeVerb("protect", api.OpTreeProtect),
		nodeVerb("unprotect", api.OpTreeUnprot),
		nodeVerb("suspend", api.OpTreeSuspend),
		nodeVerb("resume", api.OpTreeResume),
		nodeVerb("prune", api.OpTreePrune),
		{"DELETE", node, s.verb(http.StatusOK, func(r *http.Request, req *api.Request) error {
			req.Op, req.TreeID, req.NodeID = api.OpTreeAbort, r.PathValue("tree"), r.PathValue("node")
			return s.decode(r, &struct{}{})
		})},
	}
}

// CreateBody is the body of POST /v1/trees.
type CreateBody struct {
	TreeID  string      `json:"tree_id,omitempty"`
	Base    string      `json:"base"`
	Backend string      `json:"backend,omitempty"`
	Budget  *api.Budget `json:"budget,omitempty"`
}

// ForkBody is the body of POST .../fork: one label, or labels for a batch.
type ForkBody struct {
	Label  string   `json:"label,omitempty"`
	Labels []string `json:"labels,omitempty"`
}

// RollbackBody is the body of POST .../rollback.
type RollbackBody struct {
	Label string `json:"label,omitempty"`
}

func setOp(w http.ResponseWriter, op string) {
	if rec, ok := w.(*recorder); ok {
		rec.op = op
	}
}

// verb serves one verb: build fills the request from the path and body,
// then the Handler is called and its reply written with okStatus.
func (s *Server) verb(okStatus int, build func(*http.Request, *api.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var req api.Request
		err := build(r, &req)
		setOp(w, req.Op)
		var resp api.Response
		if err == nil {
			resp, err = s.call(r.Context(), req)
		}
		if err != nil {
			code := api.Code(err)
			status := Status(code)
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				status = http.StatusRequestEntityTooLarge
			}
			writeErrorStatus(w, status, err)
			s.cfg.Metrics.Observe(metrics.FaceHTTP, req.Op, code, time.Since(start))
			return
		}
		if resp.Status == "" {
			resp.Status = api.StatusOK
		}
		if req.Op == api.OpPing && resp.Version == "" {
			resp.Version = s.cfg.Version
		}
		writeJSON(w, okStatus, resp)
		s.cfg.Metrics.Observe(metrics.FaceHTTP, req.Op, metrics.CodeOK, time.Since(start))
	})
}

func (s *Server) call(ctx context.Context, req api.Request) (resp api.Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("httpapi: handler panic", "op", req.Op, "panic", p, "stack", string(debug.Stack()))
			err = api.Errorf(api.ErrInternal, "%s: the daemon failed serving this request", req.Op)
		}
	}()
	// The bearer token is the only credential HTTP has: paths a request
	// names are checked as the daemon itself.
	return s.cfg.Handler.Do(access.WithCred(ctx, s.self), req)
}

// decode reads a strict JSON object body into v; an empty body leaves v
// zero. The error wraps api.ErrBadRequest (and *http.MaxBytesError when the
// body is too large).
func (s *Server) decode(r *http.Request, v any) error {
	body := http.MaxBytesReader(nil, r.Body, s.cfg.MaxBodyBytes)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) {
		return nil // no body
	}
	if err == nil {
		if _, terr := dec.Token(); terr != io.EOF {
			err = errors.New("data after the JSON object")
			var mbe *http.MaxBytesError
			if errors.As(terr, &mbe) {
				err = terr
			}
		}
	}
	if err == nil {
		return nil
	}
	var mbe *http.MaxBytesError
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &mbe):
		return fmt.Errorf("%w: body larger than %d bytes: %w", api.ErrBadRequest, mbe.Limit, mbe)
	case errors.As(err, &se):
		return fmt.Errorf("invalid body: not valid JSON at byte %d: %w: %w", se.Offset, se, api.ErrBadRequest)
	case errors.As(err, &te):
		if te.Field != "" {
			return api.Errorf(api.ErrBadRequest, "invalid body: field %q must be %s, not %s", te.Field, te.Type, te.Value)
		}
		return api.Errorf(api.ErrBadRequest, "invalid body: a JSON object is required, not %s", te.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return api.Errorf(api.ErrBadRequest, "invalid body: truncated JSON")
	}
	return fmt.Errorf("invalid body: %w: %w", err, api.ErrBadRequest)
}
