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
	// Verbs that share a method and path are told apart by their Flag in
	// the query (file_read, file_stat, file_list), or by the body
	// (tree_fork, tree_fork_batch: the first is the route's default).
	var keys []string
	group := map[string][]api.Verb{}
	for _, v := range api.Verbs() {
		if v.Path == "" {
			continue
		}
		key := v.Method + " " + v.Path
		if group[key] == nil {
			keys = append(keys, key)
		}
		group[key] = append(group[key], v)
	}
	for _, key := range keys {
		vs := group[key]
		hs := make([]http.Handler, len(vs))
		for i, v := range vs {
			hs[i] = s.handler(v)
		}
		h := hs[0]
		if len(vs) > 1 {
			h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				q := r.URL.Query()
				pick := -1
				for i, v := range vs {
					if v.Flag != "" && q.Has(v.Flag) {
						pick = i
						break
					}
					if v.Flag == "" && pick < 0 {
						pick = i
					}
				}
				hs[max(pick, 0)].ServeHTTP(w, r)
			})
		}
		out = append(out, route{vs[0].Method, vs[0].Path, h})
	}
	return out
}

// handler serves v: the streamed verbs their own way, the rest as one
// JSON reply (verb).
func (s *Server) handler(v api.Verb) http.Handler {
	switch v.Op {
	case api.OpTreeWatch:
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.watch(w, r, r.PathValue("tree"))
		})
	case api.OpTreeExec:
		return s.exec(v)
	case api.OpExecLogs:
		return s.logs(v)
	case api.OpFileRead:
		return s.fileRead(v)
	case api.OpFileWrite:
		return s.fileWrite(v)
	case api.OpImageBuild:
		return s.imageBuild(v)
	}
	return s.verb(v)
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
		req, err := s.request(r, v)
		setOp(w, req.Op)
		var resp api.Response
		if err == nil {
			resp, err = s.call(r.Context(), req)
		}
		if err != nil {
			s.fail(w, req.Op, err, start)
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

// request is v's request from r's path, query and body.
func (s *Server) request(r *http.Request, v api.Verb) (api.Request, error) {
	var req api.Request
	v.FromPath(&req, r.PathValue)
	if err := v.FromQuery(&req, r.URL.Query()); err != nil {
		return req, err
	}
	if v.Raw {
		return req, nil
	}
	return req, s.body(r, v, &req)
}

// fail writes err as the reply and counts it.
func (s *Server) fail(w http.ResponseWriter, op string, err error, start time.Time) {
	code := api.Code(err)
	status := Status(code)
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		status = http.StatusRequestEntityTooLarge
	}
	writeErrorStatus(w, status, err)
	s.cfg.Metrics.Observe(metrics.FaceHTTP, op, code, time.Since(start))
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
