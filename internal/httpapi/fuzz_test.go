package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/facetest"
	"github.com/arbor-dev/arbor/internal/httpapi"
	"github.com/arbor-dev/arbor/internal/metrics"
)

var knownCodes = func() map[string]bool {
	m := map[string]bool{}
	for _, c := range api.Codes() {
		m[c] = true
	}
	return m
}()

// FuzzHTTP sends an arbitrary method, path and body (with the right token,
// to the real engine holding tree "t" with root "n1"): no panic; a 4xx/5xx is
// the error envelope with a known code whose mapped status it carries (or 405
// and 413, which have their own); a 2xx JSON reply carries a status.
func FuzzHTTP(f *testing.F) {
	for _, s := range [][3]string{
		{"POST", "/v1/trees", `{"tree_id":"x","base":"/b"}`},
		{"POST", "/v1/trees/t/nodes/n1/fork", `{"labels":["a","b"]}`},
		{"POST", "/v1/trees/t/nodes/n1/fork", `{"label":"a","labels":["b"]}`},
		{"POST", "/v1/trees/t/nodes/n1/commit", ``},
		{"DELETE", "/v1/trees/t/nodes/n1", `{}`},
		{"GET", "/v1/trees/t", ``},
		{"GET", "/v1/trees/t/watch", ``},
		{"GET", "/v1/events?tree=t", ``},
		{"PATCH", "/v1/trees", `{`},
		{"GET", "/../../etc/passwd", ``},
		{"POST", "/v1/trees/t/nodes/%2e%2e/prune", `{"x":1}`},
		{"GET", "/metrics", ``},
	} {
		f.Add(s[0], s[1], []byte(s[2]))
	}
	// One engine for every input (see FuzzLineAPI): tree "t" with root n1
	// is made again when an input dropped or deleted it or grew it.
	eng := facetest.NewEngine(f)
	m, _ := metrics.New(metrics.Config{NoRuntime: true})
	s, err := httpapi.New(httpapi.Config{Handler: eng, Token: "tok", Metrics: m, MaxBodyBytes: 4096})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		if !validMethod(method) {
			return // net/http never delivers such a request
		}
		u, err := url.ParseRequestURI(path)
		if err != nil || u.Host != "" || !strings.HasPrefix(path, "/") {
			return
		}
		eng.KeepTree(t, "t", "/b", 16)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond) // ends watch streams
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, method, "http://arbord"+path, bytes.NewReader(body))
		if err != nil {
			return // not a request net/http would deliver
		}
		req.RemoteAddr = "192.0.2.1:1234"
		req.Header.Set("Authorization", "Bearer tok")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		b := rec.Body.Bytes()
		ct := rec.Header().Get("Content-Type")
		switch {
		case rec.Code >= 400:
			var e struct{ Status, Code, Message string }
			if err := json.Unmarshal(b, &e); err != nil {
				t.Fatalf("%s %s: HTTP %d body %q is not the envelope", method, path, rec.Code, b)
			}
			if e.Status != "error" || !knownCodes[e.Code] || e.Message == "" {
				t.Fatalf("%s %s: HTTP %d envelope %+v", method, path, rec.Code, e)
			}
			if rec.Code != httpapi.Status(e.Code) && rec.Code != 405 && rec.Code != 413 && !(rec.Code == 404 && e.Code == api.CodeNotFound) {
				t.Fatalf("%s %s: HTTP %d for code %s", method, path, rec.Code, e.Code)
			}
		case rec.Code >= 300: // a redirect to a cleaned path
		case ct == "application/json":
			var r api.Response
			if err := json.Unmarshal(b, &r); err != nil || r.Status == "" {
				t.Fatalf("%s %s: HTTP %d reply %q", method, path, rec.Code, b)
			}
		}
	})
}

func validMethod(m string) bool {
	if m == "" || m == "CONNECT" {
		return false
	}
	for _, c := range m {
		if c < '!' || c > '~' || strings.ContainsRune(`()<>@,;:\"/[]?={}`, c) {
			return false
		}
	}
	return true
}

// The handler holds state across fuzz inputs, which is fine: the invariants
// do not depend on it.
var _ http.Handler = (*httpapi.Server)(nil)
