package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/metrics"
)

// Execer, Filer and Logger are what a Handler serves besides Do and Watch
// for the streamed verbs (the engine serves them all).
type (
	Execer interface {
		Exec(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (api.ExecExit, error)
	}
	Filer interface {
		OpenFile(ctx context.Context, req api.Request) (io.ReadCloser, api.FileInfo, error)
		WriteFile(ctx context.Context, req api.Request, r io.Reader) (api.FileInfo, error)
	}
	Logger interface {
		Logs(ctx context.Context, req api.Request, out func(api.ExecOutput) error) (*api.ExecExit, error)
	}
	// ImageBuilder serves image_build: progress gets each line of the
	// build as it comes; an error from it cancels the build.
	ImageBuilder interface {
		BuildImage(ctx context.Context, req api.Request, progress func(string) error) (api.Response, error)
	}
)

// streamWriteTimeout bounds one write of a stream: a client that stops
// reading holds back the command (back-pressure) for at most this long,
// then the stream ends and, with it, the command.
const streamWriteTimeout = time.Minute

// Stream forms of an exec or exec_logs reply, chosen by ?stream= or the
// Accept header.
const (
	formCollected = ""
	formNDJSON    = "ndjson"
	formSSE       = "sse"
)

func streamForm(r *http.Request) string {
	switch r.URL.Query().Get("stream") {
	case "ndjson", "1", "true":
		return formNDJSON
	case "sse":
		return formSSE
	}
	for _, a := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, _, _ := mime.ParseMediaType(strings.TrimSpace(a))
		switch mt {
		case "application/x-ndjson", "application/jsonl", "application/json-seq":
			return formNDJSON
		case "text/event-stream":
			return formSSE
		}
	}
	return formCollected
}

// lines writes a stream's replies, one NDJSON line or one SSE event each,
// flushed as they come, each within streamWriteTimeout.
type lines struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	form    string
	started bool
}

func (l *lines) start() {
	if l.started {
		return
	}
	l.started = true
	h := l.w.Header()
	if l.form == formSSE {
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
	} else {
		h.Set("Content-Type", "application/x-ndjson")
	}
	h.Set("X-Accel-Buffering", "no")
	h.Set("X-Content-Type-Options", "nosniff")
	l.w.WriteHeader(http.StatusOK)
}

func (l *lines) send(resp api.Response) error {
	l.start()
	l.rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	var err error
	if l.form == formSSE {
		err = writeSSE(l.w, resp.Status, "", resp)
	} else {
		var b []byte
		if b, err = json.Marshal(resp); err == nil {
			_, err = l.w.Write(append(b, '\n'))
		}
	}
	if err != nil {
		return err
	}
	return l.rc.Flush()
}

// begin starts serving a streamed verb v: its request, and the Handler as
// the H that serves it. On failure (a bad request, a Handler without H) it
// has answered, and ok is false.
func begin[H any](s *Server, w http.ResponseWriter, r *http.Request, v api.Verb) (req api.Request, h H, start time.Time, ok bool) {
	start = time.Now()
	req, err := s.request(r, v)
	setOp(w, req.Op)
	if err == nil {
		if h, ok = any(s.cfg.Handler).(H); !ok {
			err = api.Errorf(api.ErrNotSupported, "%s: not served here", v.Op)
		}
	}
	if err != nil {
		s.fail(w, req.Op, err, start)
		return req, h, start, false
	}
	return req, h, start, true
}

// exec serves POST .../exec: a background process (detach) answers at
// once; otherwise the command's output streams (NDJSON or SSE) or is
// collected into one reply (api.ExecResult).
func (s *Server) exec(v api.Verb) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		req, err := s.request(r, v)
		setOp(w, req.Op)
		if err == nil && req.Detach {
			var resp api.Response
			if resp, err = s.call(r.Context(), req); err == nil {
				writeJSON(w, http.StatusCreated, resp)
				s.cfg.Metrics.Observe(metrics.FaceHTTP, req.Op, metrics.CodeOK, time.Since(start))
				return
			}
		}
		x, ok := s.cfg.Handler.(Execer)
		if err == nil && !ok {
			err = api.Errorf(api.ErrNotSupported, "tree_exec: not served here")
		}
		if err != nil {
			s.fail(w, req.Op, err, start)
			return
		}
		ctx := access.WithCred(r.Context(), s.self)
		if form := streamForm(r); form != formCollected {
			l := &lines{w: w, rc: http.NewResponseController(w), form: form}
			exit, err := s.callExec(ctx, x, req, func(o api.ExecOutput) error {
				return l.send(api.Response{Status: api.StatusExecOutput, Output: &o})
			})
			s.endStream(w, l, req, api.Response{Status: api.StatusExecExit, TreeID: req.TreeID, NodeID: req.NodeID, Exit: &exit}, err, start)
			return
		}
		var c api.Collector
		exit, err := s.callExec(ctx, x, req, func(o api.ExecOutput) error {
			c.Add(o)
			return nil
		})
		if err != nil {
			s.fail(w, req.Op, err, start)
			return
		}
		writeJSON(w, http.StatusOK, c.Result(exit))
		s.cfg.Metrics.Observe(metrics.FaceHTTP, req.Op, metrics.CodeOK, time.Since(start))
	})
}

// endStream ends a stream with its last reply, or its error: as the reply
// itself if nothing was streamed yet, else as the stream's last line.
func (s *Server) endStream(w http.ResponseWriter, l *lines, req api.Request, last api.Response, err error, start time.Time) {
	if err != nil && !l.started {
		s.fail(w, req.Op, err, start)
		return
	}
	code := metrics.CodeOK
	if err != nil {
		last = api.Response{Status: api.StatusError, Code: api.Code(err), Message: err.Error()}
		code = last.Code
		if rec, ok := w.(*recorder); ok {
			rec.code = code
		}
	}
	l.send(last)
	s.cfg.Metrics.Observe(metrics.FaceHTTP, req.Op, code, time.Since(start))
}

func (s *Server) callExec(ctx context.Context, x Execer, req api.Request, out func(api.ExecOutput) error) (exit api.ExecExit, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("httpapi: exec panic", "panic", p, "stack", string(debug.Stack()))
			err = api.Errorf(api.ErrInternal, "tree_exec: the daemon failed serving this request")
		}
	}()
	return x.Exec(ctx, req, out)
}

// logs serves GET .../exec/logs as NDJSON (or SSE): output lines, then
// one exec_logs line with the exit once the process ended.
func (s *Server) logs(v api.Verb) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, lg, start, ok := begin[Logger](s, w, r, v)
		if !ok {
			return
		}
		form := streamForm(r)
		if form == formCollected {
			form = formNDJSON
		}
		l := &lines{w: w, rc: http.NewResponseController(w), form: form}
		x, err := lg.Logs(access.WithCred(r.Context(), s.self), req, func(o api.ExecOutput) error {
			return l.send(api.Response{Status: api.StatusExecOutput, Output: &o})
		})
		s.endStream(w, l, req, api.Response{Status: api.OpExecLogs, TreeID: req.TreeID, NodeID: req.NodeID, ProcessID: req.ProcessID, Exit: x}, err, start)
	})
}

// imageBuild serves POST /v1/images: the build's progress lines stream
// (NDJSON or SSE, each an image_progress reply) before its image_built
// reply, or, collected, the image_built reply alone once the build ends.
// A client that goes away cancels the build (it leaves nothing behind).
func (s *Server) imageBuild(v api.Verb) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, b, start, ok := begin[ImageBuilder](s, w, r, v)
		if !ok {
			return
		}
		ctx := access.WithCred(r.Context(), s.self)
		form := streamForm(r)
		var l *lines
		progress := func(string) error { return nil } // collected: the request's end cancels the build
		if form != formCollected {
			l = &lines{w: w, rc: http.NewResponseController(w), form: form}
			progress = func(line string) error {
				return l.send(api.Response{Status: api.StatusImageProgress, Progress: line})
			}
		}
		resp, err := s.callBuild(ctx, b, req, progress)
		if l != nil {
			s.endStream(w, l, req, resp, err, start)
			return
		}
		if err != nil {
			s.fail(w, req.Op, err, start)
			return
		}
		writeJSON(w, http.StatusOK, resp)
		s.cfg.Metrics.Observe(metrics.FaceHTTP, req.Op, metrics.CodeOK, time.Since(start))
	})
}

func (s *Server) callBuild(ctx context.Context, b ImageBuilder, req api.Request, progress func(string) error) (resp api.Response, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("httpapi: image_build panic", "panic", p, "stack", string(debug.Stack()))
			err = api.Errorf(api.ErrInternal, "image_build: the daemon failed serving this request")
		}
	}()
	return b.BuildImage(ctx, req, progress)
}

// File headers of GET .../files/{path}: what file_read's last line says.
const (
	HeaderFileMode  = "X-Arbor-File-Mode"  // octal permission bits
	HeaderFileSize  = "X-Arbor-File-Size"  // bytes when opened
	HeaderFileMTime = "X-Arbor-File-Mtime" // unix ns
)

// fileRead serves GET .../files/{path}: the file's bytes as the body,
// streamed.
func (s *Server) fileRead(v api.Verb) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, f, start, ok := begin[Filer](s, w, r, v)
		if !ok {
			return
		}
		rc, fi, err := f.OpenFile(access.WithCred(r.Context(), s.self), req)
		if err != nil {
			s.fail(w, req.Op, err, start)
			return
		}
		defer rc.Close()
		h := w.Header()
		h.Set("Content-Type", "application/octet-stream")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set(HeaderFileMode, fmt.Sprintf("0%o", fi.Mode))
		h.Set(HeaderFileSize, strconv.FormatInt(fi.Size, 10))
		h.Set(HeaderFileMTime, strconv.FormatInt(fi.MTimeNS, 10))
		w.WriteHeader(http.StatusOK)
		rc2 := http.NewResponseController(w)
		buf := make([]byte, 256<<10)
		code := metrics.CodeOK
		for {
			n, rerr := rc.Read(buf)
			if n > 0 {
				rc2.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
				if _, werr := w.Write(buf[:n]); werr != nil {
					code = api.CodeInternal
					break
				}
			}
			if rerr == io.EOF {
				break
			}
			if rerr != nil {
				// The status is sent: abort the body so the client sees a
				// cut transfer, not a short file.
				code = api.Code(rerr)
				s.cfg.Metrics.Observe(metrics.FaceHTTP, req.Op, code, time.Since(start))
				panic(http.ErrAbortHandler)
			}
		}
		s.cfg.Metrics.Observe(metrics.FaceHTTP, req.Op, code, time.Since(start))
	})
}

// fileWrite serves PUT .../files/{path}?mode=0644: the body, streamed, is
// the file's new content (written atomically).
func (s *Server) fileWrite(v api.Verb) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, f, start, ok := begin[Filer](s, w, r, v)
		if !ok {
			return
		}
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt == "application/json" {
			// A JSON envelope ({"data_b64": ...}) would be written as the
			// file's content: refuse it rather than corrupt the file.
			s.fail(w, req.Op, api.Errorf(api.ErrBadRequest, "file_write: the body is the file's raw bytes (Content-Type application/octet-stream), not JSON"), start)
			return
		}
		fi, err := f.WriteFile(access.WithCred(r.Context(), s.self), req, r.Body)
		if err != nil {
			s.fail(w, req.Op, err, start)
			return
		}
		writeJSON(w, http.StatusOK, api.Response{Status: v.Reply, TreeID: req.TreeID, NodeID: req.NodeID, File: &fi})
		s.cfg.Metrics.Observe(metrics.FaceHTTP, req.Op, metrics.CodeOK, time.Since(start))
	})
}
