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

// routes are the face's own routes (health, metrics, this document, the
// every-tree event stream) and one per verb of api's verb table that has
// an HTTP route (tree_fork and tree_fork_batch share theirs: the body says
// which).
func (s *Server) routes() []route {
	out := []route{
		{"GET", "/healthz", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeJSON(w, http.StatusOK, api.Response{Status: api.StatusOK})
		})},
		{"GET", "/metrics", s.cfg.Metrics.Handler()},
		{"GET", "/v1/openapi.json", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(openAPI)
		})},
		{"GET", api.EventsPath, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.watch(w, r, r.URL.Query().Get("tree"))
		})},
	}
	seen := map[string]bool{}
	for _, v := range api.Verbs() {
		key := v.Method + " " + v.Path
		if v.Path == "" || seen[key] {
			continue
		}
		seen[key] = true
		var h http.Handler
		switch {
		case v.Stream:
			h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				s.watch(w, r, r.PathValue("tree"))
			})
		default:
			h = s.verb(v)
		}
		out = append(out, route{v.Method, v.Path, h})
	}
	return out
}

func setOp(w http.ResponseWriter, op string) {
	if rec, ok := w.(*recorder); ok {
		rec.op = op
	}
}

// verb serves v: the request is built from the path and the body (the
// verb's body type, or none: an empty object at most), the Handler is
// called and its reply written.
func (s *Server) verb(v api.Verb) http.Handler {
	okStatus := http.StatusOK
	if v.Created {
		okStatus = http.StatusCreated
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		var req api.Request
		v.FromPath(&req, r.PathValue)
		err := s.body(r, v, &req)
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

// body decodes the request body of v into req. A GET reads none; a verb
// without a body type takes at most an empty object.
func (s *Server) body(r *http.Request, v api.Verb, req *api.Request) error {
	if r.Method == http.MethodGet {
		return nil
	}
	if v.Body == nil {
		return s.decode(r, &struct{}{})
	}
	b := v.Body(api.Request{})
	if err := s.decode(r, b); err != nil {
		return err
	}
	return b.Fill(req)
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
