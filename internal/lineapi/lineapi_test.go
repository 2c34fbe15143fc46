package lineapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/arbor-dev/arbor/internal/testenv"
	"io"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/access"
	"github.com/arbor-dev/arbor/internal/facetest"
	"github.com/arbor-dev/arbor/internal/lineapi"
	"github.com/arbor-dev/arbor/internal/metrics"
)

// serve runs a server for h on a fresh socket and stops it at cleanup,
// failing the test if Serve does not return.
func serve(t testing.TB, h lineapi.Handler, cfg lineapi.Config) string {
	t.Helper()
	path, _ := serveServer(t, h, cfg)
	return path
}

// serveServer is serve that also returns the server.
func serveServer(t testing.TB, h lineapi.Handler, cfg lineapi.Config) (string, *lineapi.Server) {
	t.Helper()
	path := filepath.Join(shortTemp(t), "arbord.sock")
	ln, err := lineapi.Listen(path, cfg.AllowUIDs)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Handler = h
	s, err := lineapi.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	run(t, s, ln)
	return path, s
}

// run serves ln with s until cleanup, failing the test if Serve fails or
// does not return.
func run(t testing.TB, s *lineapi.Server, ln net.Listener) {
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
}

// shortTemp is a temp dir with a short path (sun_path holds 107 bytes).
func shortTemp(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "al")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// rawLines sends in over a fresh connection, half-closes it, and returns
// every reply line.
func rawLines(t testing.TB, path, in string) []api.Response {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, in); err != nil {
		t.Fatal(err)
	}
	c.(*net.UnixConn).CloseWrite()
	var out []api.Response
	sc := bufio.NewScanner(c)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r api.Response
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("reply %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// startFace serves h on this face for the suites.
var startFace facetest.StartHandler = func(t *testing.T, f facetest.Handler) facetest.Setup {
	path := serve(t, f, lineapi.Config{})
	c, err := client.Dial(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return facetest.Setup{
		Face: c,
		Raw: func(ctx context.Context, body []byte) (string, error) {
			rs := rawLines(t, path, string(body)+"\n")
			if len(rs) != 1 {
				return "", fmt.Errorf("%d replies to one line", len(rs))
			}
			if rs[0].Status != api.StatusError {
				return "", fmt.Errorf("reply %+v is not an error", rs[0])
			}
			return rs[0].Code, nil
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

func TestProtocol(t *testing.T) {
	m, err := metrics.New(metrics.Config{NoRuntime: true})
	if err != nil {
		t.Fatal(err)
	}
	path := serve(t, facetest.NewEngine(t), lineapi.Config{MaxLineBytes: 4096, Metrics: m})
	long := `{"op":"ping","label":"` + strings.Repeat("x", 5000) + `"}`
	huge := `{"op":"ping","label":"` + strings.Repeat("y", 200000) + `"}`
	in := strings.Join([]string{
		`{"op":"ping"}`,
		``,
		`   `,
		`{"op":"nope"}`,
		`{}`,
		`null`,
		long,
		`{"op":"ping"}`,
		huge,
		`{"op":"tree_create","tree_id":"a","base":"/b"}`,
		`{"op":"tree_fork","tree_id":"a","source_id":"n1","label":"x"}`,
		`{"op":"tree_nodes","tree_id":"zz"}`,
		`{"op":"ping"}`, // last line without a newline
	}, "\n")
	rs := rawLines(t, path, in)
	want := []struct{ status, code, msg string }{
		{"pong", "", ""},
		{"error", "bad_request", `unknown op "nope"`},
		{"error", "bad_request", `no "op"`},
		{"error", "bad_request", `no "op"`},
		{"error", "bad_request", "longer than 4096 bytes"},
		{"pong", "", ""},
		{"error", "bad_request", "longer than 4096 bytes"},
		{"tree_created", "", ""},
		{"tree_forked", "", ""},
		{"error", "not_found", `tree "zz"`},
		{"pong", "", ""},
	}
	if len(rs) != len(want) {
		t.Fatalf("got %d replies, want %d: %+v", len(rs), len(want), rs)
	}
	for i, w := range want {
		r := rs[i]
		if r.Status != w.status || r.Code != w.code || !strings.Contains(r.Message, w.msg) {
			t.Errorf("reply %d: got %s/%s %q, want %s/%s containing %q", i, r.Status, r.Code, r.Message, w.status, w.code, w.msg)
		}
		if r.Status == "error" && r.Message == "" {
			t.Errorf("reply %d: error without a message", i)
		}
	}
	// Both faces count requests in one Metrics.
	rec := scrape(t, m)
	for _, s := range []string{
		`arbor_requests_total{code="ok",face="line",op="ping"} 3`,
		`arbor_requests_total{code="bad_request",face="line",op="unknown"} 5`,
		`arbor_requests_total{code="not_found",face="line",op="tree_nodes"} 1`,
		`arbor_operation_duration_seconds_count{op="tree_fork"} 1`,
	} {
		if !strings.Contains(rec, s) {
			t.Errorf("metrics lack %q", s)
		}
	}
}

func scrape(t *testing.T, m *metrics.Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

func TestErrorEnvelopeShape(t *testing.T) {
	path := serve(t, facetest.NewEngine(t), lineapi.Config{})
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "{\"op\":\"tree_nodes\",\"tree_id\":\"x\",\"extra\":true}\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatal(err)
	}
	if len(m) != 3 || m["status"] != "error" || m["code"] != "bad_request" || !strings.Contains(m["message"].(string), `unknown field "extra"`) {
		t.Fatalf("error envelope: got %s", line)
	}
}

func TestPipelined(t *testing.T) {
	path := serve(t, facetest.NewEngine(t), lineapi.Config{})
	var b strings.Builder
	b.WriteString(`{"op":"tree_create","tree_id":"p","base":"/b"}` + "\n")
	for i := range 150 {
		fmt.Fprintf(&b, `{"op":"tree_fork","tree_id":"p","source_id":"n1","label":"l%d"}`+"\n", i)
	}
	rs := rawLines(t, path, b.String())
	if len(rs) != 151 {
		t.Fatalf("got %d replies, want 151", len(rs))
	}
	for i, r := range rs[1:] {
		if r.Status != "tree_forked" || r.Forks[0].Label != fmt.Sprintf("l%d", i) {
			t.Fatalf("reply %d out of order or failed: %+v", i, r)
		}
	}
}

func TestSocketMode(t *testing.T) {
	for _, tc := range []struct {
		allow []int
		mode  os.FileMode
	}{
		{nil, 0o600},
		{[]int{}, 0o666},
		{[]int{1000, 65534}, 0o666},
	} {
		path := filepath.Join(shortTemp(t), "s.sock")
		ln, err := lineapi.Listen(path, tc.allow)
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != tc.mode {
			t.Errorf("allow %v: mode %v, want socket %v", tc.allow, fi.Mode(), tc.mode)
		}
		if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
			t.Errorf("allow %v: directory holds %d entries, want only the socket", tc.allow, len(ents))
		}
		ln.Close()
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("allow %v: socket file left after Close (%v)", tc.allow, err)
		}
	}
}

func TestStaleSocket(t *testing.T) {
	dir := shortTemp(t)
	path := filepath.Join(dir, "s.sock")
	// A socket file nothing listens on is replaced.
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	ul.Close()
	ln, err := lineapi.Listen(path, nil)
	if err != nil {
		t.Fatalf("stale socket: %v", err)
	}
	// A socket something answers on is not.
	_, err = lineapi.Listen(path, nil)
	if !errors.Is(err, api.ErrBusy) {
		t.Fatalf("live socket: got %v, want ErrBusy", err)
	}
	ln.Close()
	// Nor is a file that is not a socket.
	if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = lineapi.Listen(path, nil)
	if !errors.Is(err, api.ErrExists) {
		t.Fatalf("regular file: got %v, want ErrExists", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "x" {
		t.Fatalf("regular file was touched")
	}
}

func TestNewValidates(t *testing.T) {
	if _, err := lineapi.New(lineapi.Config{}); err == nil {
		t.Error("New without a Handler: no error")
	}
	if _, err := lineapi.New(lineapi.Config{Handler: facetest.NewEngine(t), MaxLineBytes: -1}); err == nil {
		t.Error("New with a negative MaxLineBytes: no error")
	}
}

// TestShutdown: Serve returns promptly with idle, busy and watching
// connections open, and every engine watch is given back.
func TestShutdown(t *testing.T) {
	f := facetest.NewEngine(t)
	path := filepath.Join(shortTemp(t), "s.sock")
	ln, err := lineapi.Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := lineapi.New(lineapi.Config{Handler: f})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	c := client.New(path)
	defer c.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if _, err := c.TreeCreate(cctx, client.TreeSpec{TreeID: "t", Base: "/b"}); err != nil {
		t.Fatal(err)
	}
	events, err := c.Watch(cctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	idle, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return")
	}
	for range events { // the stream ends
	}
	f.Wait()
	if n := f.Watchers(); n != 0 {
		t.Fatalf("%d engine watches still open after shutdown", n)
	}
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket file left after shutdown")
	}
	if _, err := c.Ping(cctx); err == nil {
		t.Fatal("ping after shutdown succeeded")
	}
}

// TestAllowList connects as uid 65534 (nobody) from a subprocess: refused
// with an empty allow-list, admitted when listed.
func TestAllowList(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.NeedRoot(t, "to run a client as another uid")
	}
	dir := shortTemp(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The helper binary must be reachable by nobody: copy ourselves.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "helper")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		allow []int
		want  string
	}{
		{"refused", []int{}, `"code":"unauthorized"`},
		{"refused-other", []int{4242}, `"code":"unauthorized"`},
		{"allowed", []int{65534}, `"status":"pong"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sdir := filepath.Join(dir, tc.name)
			if err := os.Mkdir(sdir, 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(sdir, "s.sock")
			ln, err := lineapi.Listen(path, tc.allow)
			if err != nil {
				t.Fatal(err)
			}
			s, _ := lineapi.New(lineapi.Config{Handler: facetest.NewEngine(t)})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Serve(ctx, ln) }()
			defer func() { cancel(); <-done }()

			out, err := runAs(t, bin, path, 65534)
			if err != nil {
				t.Fatalf("helper: %v\n%s", err, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("as uid 65534 with allow-list %v: got %q, want %s", tc.allow, out, tc.want)
			}
			// Root is always allowed.
			c := client.New(path)
			defer c.Close()
			if _, err := c.Ping(ctx); err != nil {
				t.Fatalf("root refused: %v", err)
			}
		})
	}
}

func runAs(t *testing.T, bin, sock string, uid uint32) (string, error) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run=^TestHelperClient$")
	cmd.Env = []string{"ARBOR_LINEAPI_HELPER=" + sock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	b, err := cmd.CombinedOutput()
	return string(b), err
}

// TestHelperClient is the subprocess of TestAllowList: it sends a ping and
// prints the reply line (or EOF).
func TestHelperClient(t *testing.T) {
	path := os.Getenv("ARBOR_LINEAPI_HELPER")
	if path == "" {
		t.Skip("helper process for TestAllowList")
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		fmt.Println("dial:", err)
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, `{"op":"ping"}`+"\n")
	line, err := bufio.NewReader(c).ReadString('\n')
	fmt.Printf("reply: %s err: %v\n", strings.TrimSpace(line), err)
}

// credRecorder records the requester credentials of each request.
type credRecorder struct {
	lineapi.Handler
	mu    sync.Mutex
	creds []access.Cred
	none  int
}

func (h *credRecorder) Do(ctx context.Context, req api.Request) (api.Response, error) {
	h.mu.Lock()
	if c, ok := access.FromContext(ctx); ok {
		h.creds = append(h.creds, c)
	} else {
		h.none++
	}
	h.mu.Unlock()
	return h.Handler.Do(ctx, req)
}

// TestPeerCredentials: every request carries its peer's uid, gid and
// supplementary groups (SO_PEERCRED, SO_PEERGROUPS) for the path rules.
func TestPeerCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("ARBOR_TEST_REQUIRE") != "" {
			t.Fatal("needs root to run a client as another uid (ARBOR_TEST_REQUIRE is set)")
		}
		t.Skip("needs root to run a client as another uid")
	}
	dir := shortTemp(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "helper")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	h := &credRecorder{Handler: facetest.NewEngine(t)}
	path := serve(t, h, lineapi.Config{AllowUIDs: []int{65534}})
	if err := os.Chmod(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run=^TestHelperClient$")
	cmd.Env = []string{"ARBOR_LINEAPI_HELPER=" + path}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65533, Groups: []uint32{4242, 4243}}}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"status":"pong"`) {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.none != 0 || len(h.creds) != 1 {
		t.Fatalf("requests with credentials %v, without %d", h.creds, h.none)
	}
	c := h.creds[0]
	slices.Sort(c.Groups)
	if c.UID != 65534 || c.GID != 65533 || !slices.Equal(c.Groups, []uint32{4242, 4243}) {
		t.Errorf("peer credentials %+v, want uid 65534 gid 65533 groups [4242 4243]", c)
	}
}
