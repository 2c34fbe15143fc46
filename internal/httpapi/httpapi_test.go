package httpapi_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/audit"
	"github.com/arbor-dev/arbor/internal/facetest"
	"github.com/arbor-dev/arbor/internal/httpapi"
	"github.com/arbor-dev/arbor/internal/metrics"
)

const testToken = "s3cret-token-for-tests"

// serve runs a Server for h on a loopback port until cleanup and returns
// its base URL.
func serve(t testing.TB, h httpapi.Handler, cfg httpapi.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Handler = h
	cfg.Addr = ln.Addr().String()
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	s, err := httpapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Serve did not return after its ctx ended")
		}
	})
	return "http://" + ln.Addr().String()
}

// newHTTPClient sends testToken on every request that carries no
// Authorization header; bareHTTPClient sends what the request has.
func newHTTPClient(t testing.TB) *http.Client {
	return &http.Client{Transport: withToken{bareHTTPClient(t).Transport}}
}

func bareHTTPClient(t testing.TB) *http.Client {
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

type withToken struct{ rt http.RoundTripper }

func (w withToken) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Header.Get("Authorization") == "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+testToken)
	}
	return w.rt.RoundTrip(r)
}

type envelope struct {
	Status  string `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

// call does one raw request and decodes the error envelope (if any) strictly.
func call(t *testing.T, hc *http.Client, method, url, token, body string) (int, http.Header, []byte) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res.StatusCode, res.Header, b
}

func wantEnvelope(t *testing.T, what string, status int, b []byte, wantStatus int, wantCode string) envelope {
	t.Helper()
	var e envelope
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("%s: body %q is not the error envelope: %v", what, b, err)
	}
	if status != wantStatus || e.Status != "error" || e.Code != wantCode || e.Message == "" {
		t.Fatalf("%s: got HTTP %d %+v, want HTTP %d code %s", what, status, e, wantStatus, wantCode)
	}
	return e
}

// startFace serves h on this face for the suites.
var startFace facetest.StartHandler = func(t *testing.T, f facetest.Handler) facetest.Setup {
	base := serve(t, f, httpapi.Config{Token: testToken})
	hc := newHTTPClient(t)
	return facetest.Setup{
		Face: client.NewHTTP(base, testToken, hc),
		Raw: func(ctx context.Context, body []byte) (string, error) {
			req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/trees", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+testToken)
			res, err := hc.Do(req)
			if err != nil {
				return "", err
			}
			defer res.Body.Close()
			var e envelope
			if err := json.NewDecoder(res.Body).Decode(&e); err != nil {
				return "", err
			}
			if res.StatusCode != httpapi.Status(e.Code) {
				return "", fmt.Errorf("HTTP %d for code %s", res.StatusCode, e.Code)
			}
			return e.Code, nil
		},
	}
}

func TestScenarios(t *testing.T) {
	facetest.Run(t, startFace)
}

// TestErrorTable: every row of api's error table crosses this face as its
// code and sentinel.
func TestErrorTable(t *testing.T) {
	facetest.RunErrors(t, startFace)
}

func TestAuth(t *testing.T) {
	base := serve(t, facetest.NewEngine(t), httpapi.Config{Token: testToken})
	hc := bareHTTPClient(t)
	for _, tc := range []struct {
		name, method, path, header string
		want                       int
	}{
		{"no token", "GET", "/v1/trees", "", 401},
		{"wrong token", "GET", "/v1/trees", "Bearer nope", 401},
		{"token prefix", "GET", "/v1/trees", "Bearer " + testToken[:5], 401},
		{"token plus", "GET", "/v1/trees", "Bearer " + testToken + "x", 401},
		{"basic scheme", "GET", "/v1/trees", "Basic " + testToken, 401},
		{"metrics needs it", "GET", "/metrics", "", 401},
		{"openapi needs it", "GET", "/v1/openapi.json", "", 401},
		{"unknown route needs it", "GET", "/nowhere", "", 401},
		{"verb needs it", "POST", "/v1/trees", "", 401},
		{"healthz is open", "GET", "/healthz", "", 200},
		{"right token", "GET", "/v1/trees", "Bearer " + testToken, 200},
		{"scheme any case", "GET", "/v1/trees", "bearer " + testToken, 200},
		{"metrics with token", "GET", "/metrics", "Bearer " + testToken, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(t.Context(), tc.method, base+tc.path, nil)
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			res, err := hc.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != tc.want {
				t.Fatalf("HTTP %d, want %d: %s", res.StatusCode, tc.want, b)
			}
			if tc.want == 401 {
				wantEnvelope(t, tc.name, res.StatusCode, b, 401, api.CodeAuth)
				if !strings.HasPrefix(res.Header.Get("WWW-Authenticate"), "Bearer") {
					t.Errorf("401 without WWW-Authenticate: Bearer")
				}
			}
		})
	}
	// The client maps 401 to api.ErrAuth.
	_, err := client.NewHTTP(base, "wrong", hc).Do(t.Context(), api.Request{Op: api.OpPing})
	if !errors.Is(err, api.ErrAuth) {
		t.Fatalf("client with a wrong token: %v, want ErrAuth", err)
	}
}

func TestNewRefuses(t *testing.T) {
	f := facetest.NewEngine(t)
	for _, tc := range []struct {
		addr, token string
		ok          bool
	}{
		// Never without a token, loopback or not.
		{"127.0.0.1:8890", "", false},
		{"127.5.5.5:0", "", false},
		{"[::1]:0", "", false},
		{"localhost:0", "", false},
		{"", "", false},
		{"127.0.0.1:8890", testToken, true},
		{"localhost:0", testToken, true},
		{"", testToken, true}, // the default is loopback
		{"0.0.0.0:8890", "", false},
		{":8890", "", false},
		{"[::]:8890", "", false},
		{"192.168.1.10:80", "", false},
		{"example.com:80", "", false},
		{"0.0.0.0:8890", testToken, true},
		{":8890", testToken, true},
		{"no-port", testToken, false},
		{"127.0.0.1:1", "has space", false},
	} {
		_, err := httpapi.New(httpapi.Config{Addr: tc.addr, Token: tc.token, Handler: f})
		if (err == nil) != tc.ok {
			t.Errorf("New(addr %q, token %q): err %v, want ok=%v", tc.addr, tc.token, err, tc.ok)
		}
		if !tc.ok && err != nil && tc.token == "" && strings.Contains(tc.addr, ":") && !strings.Contains(err.Error(), "without a token") {
			t.Errorf("New(%q): unclear refusal %q", tc.addr, err)
		}
	}
	if _, err := httpapi.New(httpapi.Config{}); err == nil {
		t.Error("New without a Handler: no error")
	}
}

// TestStatus: a verb failing with each row of api's error table is
// answered with the row's HTTP status and code, and the ENOSPC under
// internal as no_space's 507.
func TestStatus(t *testing.T) {
	base := serve(t, facetest.ErrorHandler{}, httpapi.Config{})
	hc := newHTTPClient(t)
	for _, k := range api.Errors() {
		st, _, b := call(t, hc, "GET", base+"/v1/trees/"+k.Code, "", "")
		wantEnvelope(t, k.Code, st, b, k.HTTPStatus, k.Code)
		if got := httpapi.Status(k.Code); got != k.HTTPStatus {
			t.Errorf("Status(%s) = %d, want the table's %d", k.Code, got, k.HTTPStatus)
		}
	}
	st, _, b := call(t, hc, "GET", base+"/v1/trees/"+facetest.CauseENOSPC, "", "")
	wantEnvelope(t, "ENOSPC under internal", st, b, 507, api.CodeNoSpace)
	if got := httpapi.Status("weird"); got != 500 {
		t.Errorf("Status(weird) = %d, want 500", got)
	}
}

// TestOpenAPICodes: the error codes openapi.json lists are api.Codes().
func TestOpenAPICodes(t *testing.T) {
	base := serve(t, facetest.NewEngine(t), httpapi.Config{})
	st, _, b := call(t, newHTTPClient(t), "GET", base+"/v1/openapi.json", "", "")
	if st != 200 {
		t.Fatalf("openapi.json: HTTP %d", st)
	}
	var doc struct {
		Components struct {
			Schemas struct {
				Error struct {
					Properties struct {
						Code struct {
							Enum []string `json:"enum"`
						} `json:"code"`
					} `json:"properties"`
				} `json:"Error"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if got := doc.Components.Schemas.Error.Properties.Code.Enum; !slices.Equal(got, api.Codes()) {
		t.Fatalf("openapi.json error codes %v, want api.Codes() %v", got, api.Codes())
	}
}

func TestRouting(t *testing.T) {
	f := facetest.NewEngine(t)
	base := serve(t, f, httpapi.Config{MaxBodyBytes: 1024})
	hc := newHTTPClient(t)
	if st, _, b := call(t, hc, "POST", base+"/v1/trees", "", `{"tree_id":"t","base":"/b"}`); st != 201 {
		t.Fatalf("create: HTTP %d %s", st, b)
	}
	for _, tc := range []struct {
		name, method, path, body string
		status                   int
		code                     string
	}{
		{"unknown route", "GET", "/v2/trees", "", 404, api.CodeNotFound},
		{"unknown verb", "POST", "/v1/trees/t/nodes/n1/explode", "", 404, api.CodeNotFound},
		{"wrong method", "PUT", "/v1/trees", "", 405, api.CodeBadRequest},
		{"wrong method on node", "GET", "/v1/trees/t/nodes/n1/commit", "", 405, api.CodeBadRequest},
		{"body too large", "POST", "/v1/trees", `{"base":"` + strings.Repeat("x", 2000) + `"}`, 413, api.CodeBadRequest},
		{"label and labels", "POST", "/v1/trees/t/nodes/n1/fork", `{"label":"a","labels":["b"]}`, 400, api.CodeBadRequest},
		{"empty labels", "POST", "/v1/trees/t/nodes/n1/fork", `{"labels":[]}`, 400, api.CodeBadRequest},
		{"body on commit", "POST", "/v1/trees/t/nodes/n1/commit", `{"force":true}`, 400, api.CodeBadRequest},
		{"not an object", "POST", "/v1/trees", `[1]`, 400, api.CodeBadRequest},
		{"trailing data", "POST", "/v1/trees", `{"base":"/b"}x`, 400, api.CodeBadRequest},
		{"unknown tree", "GET", "/v1/trees/zz", "", 404, api.CodeNotFound},
		{"unknown node", "POST", "/v1/trees/t/nodes/zz/protect", "", 404, api.CodeNotFound},
		{"exists", "POST", "/v1/trees", `{"tree_id":"t","base":"/b"}`, 409, api.CodeExists},
		{"root commit", "POST", "/v1/trees/t/nodes/n1/commit", "{}", 409, api.CodeState},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, h, b := call(t, hc, tc.method, base+tc.path, "", tc.body)
			wantEnvelope(t, tc.name, st, b, tc.status, tc.code)
			if st == 405 && h.Get("Allow") == "" {
				t.Errorf("405 without Allow")
			}
		})
	}
	// Verbs with an empty body or {} both work; replies are api.Responses.
	for _, body := range []string{"", "{}"} {
		st, _, b := call(t, hc, "POST", base+"/v1/trees/t/nodes/n1/fork", "", `{"label":"x`+strconv.Itoa(len(body))+`"}`)
		if st != 201 {
			t.Fatalf("fork: HTTP %d %s", st, b)
		}
		var r api.Response
		json.Unmarshal(b, &r)
		st, _, b = call(t, hc, "POST", base+"/v1/trees/t/nodes/"+r.NodeID+"/suspend", "", body)
		if st != 200 || !strings.Contains(string(b), `"status":"ok"`) {
			t.Fatalf("suspend with body %q: HTTP %d %s", body, st, b)
		}
	}
	if st, h, b := call(t, hc, "GET", base+"/healthz", "", ""); st != 200 || h.Get("Content-Type") != "application/json" {
		t.Fatalf("healthz: HTTP %d %s", st, b)
	}
}

func TestOpenAPIMatchesRoutes(t *testing.T) {
	s, err := httpapi.New(httpapi.Config{Handler: facetest.NewEngine(t), Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, facetest.NewEngine(t), httpapi.Config{})
	st, _, b := call(t, newHTTPClient(t), "GET", base+"/v1/openapi.json", "", "")
	if st != 200 {
		t.Fatalf("openapi.json: HTTP %d", st)
	}
	var doc struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi version %q", doc.OpenAPI)
	}
	var documented, registered []string
	for path, ops := range doc.Paths {
		for m := range ops {
			if m == "parameters" {
				continue
			}
			documented = append(documented, strings.ToUpper(m)+" "+path)
		}
	}
	for _, r := range s.Routes() {
		registered = append(registered, r.Method+" "+r.Pattern)
	}
	slices.Sort(documented)
	slices.Sort(registered)
	for _, r := range registered {
		if !slices.Contains(documented, r) {
			t.Errorf("route %s is not in openapi.json", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(registered, d) {
			t.Errorf("openapi.json documents %s, which is not a route", d)
		}
	}
	// Every $ref resolves.
	var all map[string]any
	json.Unmarshal(b, &all)
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				var cur any = all
				for _, p := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
					m, _ := cur.(map[string]any)
					cur = m[p]
				}
				if cur == nil {
					t.Errorf("dangling $ref %s", ref)
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(all)
}

func TestAuditLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.log")
	if err := os.WriteFile(path, []byte("{\"earlier\":true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := httpapi.OpenAuditLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The file is opened append-only.
	info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", f.Fd()))
	if err == nil {
		var flags int64
		for l := range strings.Lines(string(info)) {
			if v, ok := strings.CutPrefix(l, "flags:"); ok {
				flags, _ = strconv.ParseInt(strings.TrimSpace(v), 8, 64)
			}
		}
		if flags&int64(os.O_APPEND) == 0 {
			t.Errorf("audit log fd flags %o lack O_APPEND", flags)
		}
	}
	base := serve(t, facetest.NewEngine(t), httpapi.Config{Token: testToken, Audit: audit.New(f, nil)})
	hc := newHTTPClient(t)
	call(t, hc, "POST", base+"/v1/trees", testToken, `{"tree_id":"t","base":"/b"}`)
	call(t, hc, "POST", base+"/v1/trees/t/nodes/n1/fork?x=1", testToken, `{"label":"a"}`)
	call(t, hc, "GET", base+"/v1/trees", "wrong-"+testToken, "")
	call(t, hc, "GET", base+"/healthz", "", "")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), testToken) {
		t.Fatalf("audit log contains the token:\n%s", b)
	}
	type line struct {
		Time       string `json:"time"`
		Remote     string `json:"remote"`
		Method     string `json:"method"`
		Path       string `json:"path"`
		Status     int    `json:"status"`
		DurationUS int64  `json:"duration_us"`
		Op         string `json:"op"`
		Tree       string `json:"tree"`
		Node       string `json:"node"`
		UA         string `json:"ua"`
		Earlier    bool   `json:"earlier"`
	}
	var lines []line
	for l := range strings.Lines(string(b)) {
		var x line
		if err := json.Unmarshal([]byte(l), &x); err != nil {
			t.Fatalf("audit line %q: %v", l, err)
		}
		lines = append(lines, x)
	}
	if len(lines) != 5 || !lines[0].Earlier {
		t.Fatalf("audit log: %d lines (want the earlier one kept plus 4):\n%s", len(lines), b)
	}
	want := []line{
		{Method: "POST", Path: "/v1/trees", Status: 201, Op: api.OpTreeCreate},
		{Method: "POST", Path: "/v1/trees/t/nodes/n1/fork", Status: 201, Op: api.OpTreeFork, Tree: "t", Node: "n1"},
		{Method: "GET", Path: "/v1/trees", Status: 401},
		{Method: "GET", Path: "/healthz", Status: 200},
	}
	for i, w := range want {
		g := lines[i+1]
		if g.Method != w.Method || g.Path != w.Path || g.Status != w.Status || g.Op != w.Op || g.Tree != w.Tree || g.Node != w.Node {
			t.Errorf("audit line %d: got %+v, want %+v", i, g, w)
		}
		if _, err := time.Parse(time.RFC3339Nano, g.Time); err != nil || g.Remote == "" {
			t.Errorf("audit line %d: time %q remote %q", i, g.Time, g.Remote)
		}
	}
}

func TestMetrics(t *testing.T) {
	m, err := metrics.New(metrics.Config{Gauges: metrics.GaugesFunc(func() []metrics.TreeGauge {
		return []metrics.TreeGauge{{TreeID: "t", Nodes: map[string]int{"live": 3}, LiveNodes: 3, MaxLiveNodes: 8}}
	})})
	if err != nil {
		t.Fatal(err)
	}
	base := serve(t, facetest.NewEngine(t), httpapi.Config{Metrics: m})
	hc := newHTTPClient(t)
	call(t, hc, "POST", base+"/v1/trees", "", `{"tree_id":"t","base":"/b"}`)
	call(t, hc, "POST", base+"/v1/trees/t/nodes/n1/fork", "", `{"labels":["a","b"]}`)
	call(t, hc, "POST", base+"/v1/trees/t/nodes/n2/commit", "", ``)
	call(t, hc, "POST", base+"/v1/trees/t/nodes/n3/commit", "", ``)
	call(t, hc, "POST", base+"/v1/trees/t/evict", "", ``)
	call(t, hc, "GET", base+"/nope", "", ``)
	st, _, b := call(t, hc, "GET", base+"/metrics", "", "")
	if st != 200 {
		t.Fatalf("metrics: HTTP %d", st)
	}
	for _, s := range []string{
		`arbor_requests_total{code="ok",face="http",op="tree_create"} 1`,
		`arbor_requests_total{code="ok",face="http",op="tree_fork_batch"} 1`,
		`arbor_requests_total{code="ok",face="http",op="tree_commit"} 1`,
		`arbor_requests_total{code="stale",face="http",op="tree_commit"} 1`,
		`arbor_requests_total{code="not_found",face="http",op="unknown"} 1`,
		`arbor_operation_duration_seconds_count{op="tree_commit"} 2`,
		`arbor_operation_duration_seconds_count{op="tree_auto_evict"} 1`,
		`arbor_tree_nodes{state="live",tree="t"} 3`,
		`arbor_trees 1`,
	} {
		if !strings.Contains(string(b), s) {
			t.Errorf("metrics lack %q", s)
		}
	}
}

// TestWatchSSE reads the raw stream: the snapshot event, then events with
// ids, as the socket face's JSON lines.
func TestWatchSSE(t *testing.T) {
	f := facetest.NewEngine(t)
	base := serve(t, f, httpapi.Config{})
	hc := newHTTPClient(t)
	call(t, hc, "POST", base+"/v1/trees", "", `{"tree_id":"t","base":"/b"}`)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/v1/events?tree=t", nil)
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("content type %q", res.Header.Get("Content-Type"))
	}
	br := bufio.NewReader(res.Body)
	readEvent := func() string {
		var ev strings.Builder
		for {
			l, err := br.ReadString('\n')
			if err != nil {
				t.Fatalf("stream: %v after %q", err, ev.String())
			}
			if l == "\n" {
				return ev.String()
			}
			ev.WriteString(l)
		}
	}
	if snap := readEvent(); !strings.HasPrefix(snap, "event: tree_watching\ndata: {\"status\":\"tree_watching\"") || !strings.Contains(snap, `"nodes":[`) {
		t.Fatalf("snapshot event: %q", snap)
	}
	call(t, hc, "POST", base+"/v1/trees/t/nodes/n1/protect", "", "")
	ev := readEvent()
	if !strings.HasPrefix(ev, "event: tree_event\nid: ") || !strings.Contains(ev, `"kind":"protect"`) || !strings.Contains(ev, `data: {"status":"tree_event","event":{`) {
		t.Fatalf("event: %q", ev)
	}
	// Unknown tree: the envelope, not a stream.
	st, _, b := call(t, hc, "GET", base+"/v1/trees/zz/watch", "", "")
	wantEnvelope(t, "watch unknown tree", st, b, 404, api.CodeNotFound)
}

// TestShutdownEndsStreams: Serve returns promptly with a watch stream open,
// and the engine's watch is given back.
func TestShutdownEndsStreams(t *testing.T) {
	f := facetest.NewEngine(t)
	f.Do(t.Context(), api.Request{Op: api.OpTreeCreate, TreeID: "t", Base: "/b"})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := httpapi.New(httpapi.Config{Handler: f, Addr: ln.Addr().String(), Token: testToken, ShutdownTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	hc := newHTTPClient(t)
	events, err := client.NewHTTP("http://"+ln.Addr().String(), testToken, hc).Watch(t.Context(), "t")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("shutdown took %v with a watch open; streams should end at once", d)
	}
	for range events {
	}
	f.Wait()
	if n := f.Watchers(); n != 0 {
		t.Fatalf("%d engine watches open after shutdown", n)
	}
}

// TestOpenAPIMatchesVerbs: openapi.json documents each verb of api's table
// at its route: the op as operationId, its success status, its body's
// schema (named as the api type, with the type's fields), and a Response
// schema holding every reply field.
func TestOpenAPIMatchesVerbs(t *testing.T) {
	type op struct {
		OperationID string                     `json:"operationId"`
		Responses   map[string]json.RawMessage `json:"responses"`
		RequestBody struct {
			Content map[string]struct {
				Schema struct {
					Ref string `json:"$ref"`
				} `json:"schema"`
			} `json:"content"`
		} `json:"requestBody"`
	}
	var doc struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(openAPIDoc(t), &doc); err != nil {
		t.Fatal(err)
	}
	props := func(name string) []string {
		var out []string
		for p := range doc.Components.Schemas[name].Properties {
			out = append(out, p)
		}
		slices.Sort(out)
		return out
	}
	seen := map[string]bool{}
	for _, v := range api.Verbs() {
		for _, f := range v.ReplyFields {
			if !slices.Contains(props("Response"), f) {
				t.Errorf("%s: reply field %s is not in the Response schema", v.Op, f)
			}
		}
		key := v.Method + " " + v.Path
		if v.Path == "" || seen[key] {
			continue
		}
		seen[key] = true
		raw, ok := doc.Paths[v.Path][strings.ToLower(v.Method)]
		if !ok {
			t.Errorf("%s: %s is not documented", v.Op, key)
			continue
		}
		var o op
		if err := json.Unmarshal(raw, &o); err != nil {
			t.Fatal(err)
		}
		if o.OperationID != v.Op {
			t.Errorf("%s: operationId %q, want the op", key, o.OperationID)
		}
		success := "200"
		if v.Created {
			success = "201"
		}
		if _, ok := o.Responses[success]; !ok {
			t.Errorf("%s: no %s response documented", v.Op, success)
		}
		ref := strings.TrimPrefix(o.RequestBody.Content["application/json"].Schema.Ref, "#/components/schemas/")
		switch {
		case v.Body != nil:
			typ := reflect.TypeOf(v.Body(api.Request{})).Elem()
			var want []string
			for i := range typ.NumField() {
				name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
				want = append(want, name)
			}
			slices.Sort(want)
			if ref != typ.Name() || !slices.Equal(props(ref), want) {
				t.Errorf("%s: body schema %q %v, want %s %v", v.Op, ref, props(ref), typ.Name(), want)
			}
		case v.Method == "POST":
			if ref != "Empty" || len(props("Empty")) != 0 {
				t.Errorf("%s: takes no body, documented as %q", v.Op, ref)
			}
		case ref != "":
			t.Errorf("%s: takes no body, documented as %q", v.Op, ref)
		}
	}
}

func openAPIDoc(t *testing.T) []byte {
	t.Helper()
	base := serve(t, facetest.NewEngine(t), httpapi.Config{})
	st, _, b := call(t, newHTTPClient(t), "GET", base+"/v1/openapi.json", "", "")
	if st != 200 {
		t.Fatalf("openapi.json: HTTP %d", st)
	}
	return b
}
