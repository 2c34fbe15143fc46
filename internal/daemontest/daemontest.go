// Package daemontest runs a real arbord in-process for the tests of the
// packages built on it (the MCP server, the web view, the CLI): a fresh
// home and base directory, the socket, and optionally the HTTP face on a
// free loopback port. It needs root and /dev/fuse (testenv.NeedFUSE).
package daemontest

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/daemon"
	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// Token is the HTTP face's bearer token.
const Token = "daemontest-token"

// Daemon is a running arbord.
type Daemon struct {
	Home   string         // its state directory
	Base   string         // an empty directory for trees to start from
	Socket string         // its socket
	URL    string         // http://ADDR of its HTTP face; empty without one
	Client *client.Client // a client of the socket
}

// Start runs arbord until the test ends, with its HTTP face (token Token)
// if withHTTP is set, and returns once both answer. Its cleanup stops the
// daemon, detaches any mount left under its directory, and removes it.
func Start(tb testing.TB, withHTTP bool) Daemon {
	tb.Helper()
	testenv.NeedFUSE(tb)
	dir, err := os.MkdirTemp("", "arbor-dt-") // short: socket paths are limited to 108 bytes
	if err != nil {
		tb.Fatal(err)
	}
	d := Daemon{Home: filepath.Join(dir, "home"), Base: filepath.Join(dir, "base")}
	d.Socket = filepath.Join(d.Home, "arbord.sock")
	cfg := daemon.Config{Home: d.Home}
	if withHTTP {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		cfg.HTTPAddr, cfg.Token = ln.Addr().String(), Token
		ln.Close()
		d.URL = "http://" + cfg.HTTPAddr
	}
	ready := make(chan struct{})
	cfg.Ready = ready
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- daemon.Run(ctx, cfg) }()
	tb.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				tb.Errorf("daemon: %v", err)
			}
		case <-time.After(30 * time.Second):
			tb.Errorf("the daemon did not stop within 30s")
		}
		ms := fusemount.Under(dir)
		for i := len(ms) - 1; i >= 0; i-- {
			fusemount.Detach(ms[i].Point)
		}
		os.RemoveAll(dir)
	})
	if err := os.MkdirAll(d.Base, 0o755); err != nil {
		tb.Fatal(err)
	}
	select {
	case <-ready:
	case err := <-done:
		tb.Fatalf("daemon: %v", err)
	case <-time.After(20 * time.Second):
		tb.Fatal("the daemon was not ready within 20s")
	}
	if withHTTP {
		waitHTTP(tb, d.URL)
	}
	d.Client = client.New(d.Socket)
	tb.Cleanup(func() { d.Client.Close() })
	return d
}

// waitHTTP waits for the HTTP face: Ready says the socket accepts, and
// the HTTP face starts beside it.
func waitHTTP(tb testing.TB, url string) {
	tb.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		res, err := http.Get(url + "/healthz")
		if err == nil {
			res.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the HTTP face did not answer within 10s: %v", err)
		}
	}
}
