package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/metrics"
)

// keepalive is how often an idle watch stream gets a comment line.
const keepalive = 15 * time.Second

// watch streams a tree's events as server-sent events.
func (s *Server) watch(w http.ResponseWriter, r *http.Request, tree string) {
	start := time.Now()
	setOp(w, api.OpTreeWatch)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if stopping, ok := r.Context().Value(stopKey{}).(context.Context); ok {
		defer context.AfterFunc(stopping, cancel)() // server shutdown ends the stream
	}
	snap, events, err := s.callWatch(ctx, tree)
	if err != nil {
		writeError(w, err)
		s.cfg.Metrics.Observe(metrics.FaceHTTP, api.OpTreeWatch, api.Code(err), time.Since(start))
		return
	}
	s.cfg.Metrics.Observe(metrics.FaceHTTP, api.OpTreeWatch, metrics.CodeOK, time.Since(start))
	rc := http.NewResponseController(w)
	rc.SetWriteDeadline(time.Time{}) // a stream outlives any server write timeout
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if snap.Status == "" {
		snap.Status = api.StatusWatching
	}
	if writeSSE(w, api.StatusWatching, "", snap) != nil || rc.Flush() != nil {
		return
	}
	tick := time.NewTicker(keepalive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		case ev, ok := <-events:
			if !ok {
				return
			}
			if writeSSE(w, api.StatusEvent, fmt.Sprint(ev.Seq), api.Response{Status: api.StatusEvent, Event: &ev}) != nil {
				return
			}
			if len(events) == 0 && rc.Flush() != nil {
				return
			}
		}
	}
}

func writeSSE(w http.ResponseWriter, event, id string, v any) error {
	b, err := json.Marshal(v) // one line: JSON has no raw newlines
	if err != nil {
		return err
	}
	if id != "" {
		_, err = fmt.Fprintf(w, "event: %s\nid: %s\ndata: %s\n\n", event, id, b)
	} else {
		_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
	}
	return err
}

func (s *Server) callWatch(ctx context.Context, tree string) (snap api.Response, ch <-chan api.Event, err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("httpapi: watch panic", "tree", tree, "panic", p, "stack", string(debug.Stack()))
			err = api.Errorf(api.ErrInternal, "tree_watch: the daemon failed serving this request")
		}
	}()
	return s.cfg.Handler.Watch(ctx, tree)
}
