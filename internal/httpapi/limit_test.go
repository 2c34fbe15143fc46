package httpapi_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/facetest"
	"github.com/arbor-dev/arbor/internal/httpapi"
)

// TestMaxConns: past MaxConns open connections (here idle ones that send
// nothing, a flood that holds descriptors) a new client is not served
// until one of them goes; then it is.
func TestMaxConns(t *testing.T) {
	base := serve(t, facetest.NewEngine(t), httpapi.Config{MaxConns: 4})
	addr := strings.TrimPrefix(base, "http://")
	var idle []net.Conn
	for range 4 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
		defer c.Close()
	}
	healthz := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, "GET", base+"/healthz", nil)
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	time.Sleep(100 * time.Millisecond) // the server has accepted the four
	if err := healthz(500 * time.Millisecond); err == nil {
		t.Fatal("a fifth connection was served past MaxConns 4")
	}
	idle[0].Close()
	if err := healthz(5 * time.Second); err != nil {
		t.Fatalf("after one of the four closed: %v", err)
	}
}
