package lineapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/facetest"
	"github.com/arbor-dev/arbor/internal/lineapi"
	"github.com/arbor-dev/arbor/internal/metrics"
)

func TestDefaultLimits(t *testing.T) {
	for _, c := range []struct {
		nofile      uint64
		allow       int
		conns, peru int
	}{
		{1024, 0, 768, 768},      // the reserve: at least 256
		{1024, 1, 768, 384},      // one allowed uid gets half
		{20000, 3, 4096, 1024},   // three: a quarter each, a quarter left for root and the owner
		{20000, 0, 4096, 4096},   // a quarter reserved, capped at 4096
		{4000, 0, 3000, 3000},    // a quarter reserved
		{100, 0, 50, 50},         // tiny: half
		{1 << 20, 1, 4096, 2048}, // huge
		{1, 0, 1, 1},             // never zero
	} {
		l := lineapi.DefaultLimits(c.nofile, c.allow)
		if l.MaxConns != c.conns || l.MaxConnsPerUID != c.peru || l.IdleTimeout != lineapi.DefaultIdleTimeout {
			t.Errorf("DefaultLimits(%d, %v) = %+v, want %d conns, %d per uid", c.nofile, c.allow, l, c.conns, c.peru)
		}
		if c.nofile > 2*256 && uint64(l.MaxConns)+256 > c.nofile {
			t.Errorf("DefaultLimits(%d) leaves %d descriptors, under the reserve of 256", c.nofile, int(c.nofile)-l.MaxConns)
		}
	}
	if _, err := lineapi.New(lineapi.Config{Handler: facetest.NewEngine(t), MaxConns: -1}); err == nil {
		t.Error("New accepted MaxConns -1")
	}
}

// readReply reads one reply line from c within d.
func readReply(t *testing.T, c net.Conn, d time.Duration) (api.Response, error) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	b, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		return api.Response{}, err
	}
	var r api.Response
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatalf("reply %q: %v", b, err)
	}
	return r, nil
}

func dial(t *testing.T, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ping sends a ping on c and reads its reply.
func ping(t *testing.T, c net.Conn) (api.Response, error) {
	t.Helper()
	if _, err := c.Write([]byte(`{"op":"ping"}` + "\n")); err != nil {
		return api.Response{}, err
	}
	return readReply(t, c, 5*time.Second)
}

// TestConnCap: past MaxConns a connection gets one limit line and is
// closed; a closed connection frees its slot; the per-uid cap counts one
// uid's connections.
func TestConnCap(t *testing.T) {
	m, err := metrics.New(metrics.Config{NoRuntime: true})
	if err != nil {
		t.Fatal(err)
	}
	path := serve(t, facetest.NewEngine(t), lineapi.Config{MaxConns: 3, Metrics: m})
	var held []net.Conn
	for range 3 {
		c := dial(t, path)
		if r, err := ping(t, c); err != nil || r.Status != "pong" {
			t.Fatalf("ping within the cap: %+v, %v", r, err)
		}
		held = append(held, c)
	}
	over := dial(t, path)
	r, err := readReply(t, over, 5*time.Second)
	rec := scrape(t, m)
	for _, s := range []string{`arbor_line_connections 3`, `arbor_line_connections_limited_total{reason="max_conns"} 1`} {
		if !strings.Contains(rec, s) {
			t.Errorf("metrics lack %q", s)
		}
	}
	if err != nil || r.Status != api.StatusError || r.Code != api.CodeLimit || !strings.Contains(r.Message, "too many connections (3 open, the limit is 3)") {
		t.Fatalf("a connection past the cap: %+v, %v", r, err)
	}
	if _, err := readReply(t, over, 5*time.Second); err == nil {
		t.Fatal("the refused connection stayed open")
	}
	// The Go client maps the refusal to api.ErrLimit.
	cl := client.New(path)
	defer cl.Close()
	if _, err := cl.Ping(context.Background()); !errors.Is(err, api.ErrLimit) {
		t.Fatalf("client ping past the cap: %v, want ErrLimit", err)
	}
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := cl.Ping(context.Background()); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("ping after a connection closed: %v", err)
		}
		time.Sleep(5 * time.Millisecond)
	}

	peruid := serve(t, facetest.NewEngine(t), lineapi.Config{MaxConns: 10, MaxConnsPerUID: 2})
	for range 2 {
		if r, err := ping(t, dial(t, peruid)); err != nil || r.Status != "pong" {
			t.Fatalf("ping within the per-uid cap: %+v, %v", r, err)
		}
	}
	r, err = readReply(t, dial(t, peruid), 5*time.Second)
	if err != nil || r.Code != api.CodeLimit || !strings.Contains(r.Message, "per uid is 2") {
		t.Fatalf("a third connection of one uid, per-uid cap 2: %+v, %v", r, err)
	}
}

// TestIdleTimeout: a connection with nothing in flight is closed after the
// idle timeout, told why; one that keeps sending requests, and a watch,
// are not.
func TestIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	fake := facetest.NewEngine(t)
	if _, err := fake.Do(context.Background(), api.Request{Op: api.OpTreeCreate, TreeID: "t", Base: "/b"}); err != nil {
		t.Fatal(err)
	}
	path := serve(t, fake, lineapi.Config{IdleTimeout: idle})
	quiet, busy, watch := dial(t, path), dial(t, path), dial(t, path)
	if _, err := watch.Write([]byte(`{"op":"tree_watch","tree_id":"t"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	wr := bufio.NewReader(watch)
	watch.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := wr.ReadBytes('\n'); err != nil || !strings.Contains(string(b), "tree_watching") {
		t.Fatalf("watch: %q, %v", b, err)
	}
	// A partial line does not keep a connection alive, and is not served.
	if _, err := quiet.Write([]byte(`{"op":"pi`)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for time.Since(start) < 3*idle {
		if r, err := ping(t, busy); err != nil || r.Status != "pong" {
			t.Fatalf("a busy connection after %v: %+v, %v", time.Since(start), r, err)
		}
		time.Sleep(idle / 4)
	}
	r, err := readReply(t, quiet, 5*time.Second)
	if err != nil || r.Code != api.CodeLimit || !strings.Contains(r.Message, "idle timeout") {
		t.Fatalf("an idle connection: %+v, %v", r, err)
	}
	if _, err := readReply(t, quiet, 5*time.Second); err == nil {
		t.Fatal("the idle connection stayed open after its notice")
	}
	// The watch is still open: an event reaches it.
	if _, err := fake.Do(context.Background(), api.Request{Op: api.OpTreeFork, TreeID: "t", SourceID: "n1", Label: "x"}); err != nil {
		t.Fatal(err)
	}
	watch.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := wr.ReadBytes('\n'); err != nil || !strings.Contains(string(b), "tree_event") {
		t.Fatalf("a watch after %v: %q, %v", time.Since(start), b, err)
	}
}

// TestClientIdleReconnect: the Go client's pooled connection, closed by
// the daemon's idle timeout, is replaced without the caller seeing it, for
// a verb that is not read-only too.
func TestClientIdleReconnect(t *testing.T) {
	const idle = 100 * time.Millisecond
	fake := facetest.NewEngine(t)
	path := serve(t, fake, lineapi.Config{IdleTimeout: idle})
	cl := client.New(path)
	defer cl.Close()
	if _, err := cl.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * idle)
	if _, err := cl.Do(context.Background(), api.Request{Op: api.OpTreeCreate, TreeID: "t", Base: "/b"}); err != nil {
		t.Fatalf("tree_create on a connection the daemon closed for idling: %v", err)
	}
}

// emfileListener fails Accept with EMFILE while fail is set, except for
// the accept the server makes right after freeing its spare descriptor.
type emfileListener struct {
	net.Listener
	fail    atomic.Bool
	calls   atomic.Int64
	drained atomic.Int64
	armed   atomic.Bool // the next Accept is the drain's
}

func (l *emfileListener) Accept() (net.Conn, error) {
	l.calls.Add(1)
	if l.fail.Load() {
		if l.armed.Swap(false) {
			l.drained.Add(1)
			return l.Listener.Accept()
		}
		l.armed.Store(true)
		return nil, &net.OpError{Op: "accept", Net: "unix", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

func (l *emfileListener) SetDeadline(t time.Time) error {
	return l.Listener.(interface{ SetDeadline(time.Time) error }).SetDeadline(t)
}

// TestAcceptOutOfFiles: when accept fails with EMFILE the server backs off
// (it does not spin) and, with its spare descriptor, takes a waiting
// connection to refuse it with a limit line rather than leave it hanging.
func TestAcceptOutOfFiles(t *testing.T) {
	path := filepath.Join(shortTemp(t), "s")
	inner, err := lineapi.Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln := &emfileListener{Listener: inner}
	ln.fail.Store(true)
	s, err := lineapi.New(lineapi.Config{Handler: facetest.NewEngine(t)})
	if err != nil {
		t.Fatal(err)
	}
	run(t, s, ln)
	c := dial(t, path)
	r, err := readReply(t, c, 5*time.Second)
	if err != nil || r.Code != api.CodeLimit || !strings.Contains(r.Message, "out of file descriptors") {
		t.Fatalf("a connection waiting while accept fails with EMFILE: %+v, %v", r, err)
	}
	before := ln.calls.Load()
	time.Sleep(500 * time.Millisecond)
	if n := ln.calls.Load() - before; n > 20 {
		t.Fatalf("%d accept calls in 500ms while out of descriptors: the server spins", n)
	}
	ln.fail.Store(false)
	// The backoff is at most a second; then the server serves again.
	c2 := dial(t, path)
	if r, err := ping(t, c2); err != nil || r.Status != "pong" {
		t.Fatalf("ping once descriptors are back: %+v, %v", r, err)
	}
}
