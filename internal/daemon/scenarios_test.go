package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/facetest"
	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/httpapi"
	"github.com/arbor-dev/arbor/internal/image"
	"github.com/arbor-dev/arbor/internal/lineapi"
	"github.com/arbor-dev/arbor/internal/testenv"
)

const testToken = "daemon-test-token"

// realTarget is the daemon's router over a fresh home: real workspaces,
// the real engine, and tree files mounted with FUSE.
func realTarget(t *testing.T) facetest.Target {
	home, base := tempDir(t), tempDir(t)
	writeFile(t, filepath.Join(base, "a.txt"), "base")
	r, closeAll, err := compose(home, nil, "", &fusemount.Aborter{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	return facetest.Target{Handler: r, Base: base, Version: Version}
}

// serveLine serves h on a fresh socket until the test ends.
func serveLine(t *testing.T, h lineapi.Handler) string {
	path := filepath.Join(tempDir(t), "s.sock")
	ln, err := lineapi.Listen(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := lineapi.New(lineapi.Config{Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, func(ctx context.Context) error { return s.Serve(ctx, ln) })
	return path
}

// serveHTTP serves h on a loopback port until the test ends.
func serveHTTP(t *testing.T, h httpapi.Handler) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := httpapi.New(httpapi.Config{Addr: ln.Addr().String(), Token: testToken, Handler: h, Version: Version})
	if err != nil {
		t.Fatal(err)
	}
	serve(t, func(ctx context.Context) error { return s.Serve(ctx, ln) })
	return "http://" + ln.Addr().String()
}

func serve(t *testing.T, run func(ctx context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Errorf("serve did not return after its ctx ended")
		}
	})
}

// TestScenarios runs the faces' shared scenario suite over both faces
// against the daemon's router: the real engine on FUSE-mounted tree files.
func TestScenarios(t *testing.T) {
	testenv.NeedFUSE(t)
	t.Run("Socket", func(t *testing.T) { facetest.RunTarget(t, realTarget, socketFace) })
	t.Run("HTTP", func(t *testing.T) { facetest.RunTarget(t, realTarget, httpFace) })
}

// TestImageScenarios runs the faces' image scenarios over both faces
// against the daemon's router, its image store building with a stand-in
// for mmdebstrap (run as root inside unshare, as mmdebstrap is).
func TestImageScenarios(t *testing.T) {
	testenv.NeedRoot(t, "the image store runs its builder as root inside unshare")
	testenv.NeedCommand(t, testenv.Root, "unshare")
	imageTarget := func(t *testing.T) facetest.Target {
		mm := facetest.StandInBuilder(t)
		r, closeAll, err := compose(tempDir(t), nil, "", &fusemount.Aborter{}, nil, nil, nil, func(c *image.Config) {
			c.Mmdebstrap, c.Sources = mm, []string{}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(closeAll)
		return facetest.Target{Handler: r, Base: tempDir(t), Version: Version}
	}
	t.Run("Socket", func(t *testing.T) { facetest.RunImages(t, imageTarget, socketFace) })
	t.Run("HTTP", func(t *testing.T) { facetest.RunImages(t, imageTarget, httpFace) })
}

// socketFace serves h on a fresh socket; the face is the Go client of it.
func socketFace(t *testing.T, h facetest.Handler) facetest.Setup {
	path := serveLine(t, h)
	c := client.New(path)
	t.Cleanup(func() { c.Close() })
	return facetest.Setup{Face: c, Raw: func(ctx context.Context, body []byte) (string, error) {
		r, err := rawLine(ctx, path, string(body))
		if err != nil {
			return "", err
		}
		if r.Status != api.StatusError {
			return "", fmt.Errorf("reply %+v is not an error", r)
		}
		return r.Code, nil
	}}
}

// httpFace serves h over HTTP on loopback; the face is the Go HTTP client.
func httpFace(t *testing.T, h facetest.Handler) facetest.Setup {
	base := serveHTTP(t, h)
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: tr}
	return facetest.Setup{Face: client.NewHTTP(base, testToken, hc), Raw: func(ctx context.Context, body []byte) (string, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/trees", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		res, err := hc.Do(req)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		var e api.Response
		if err := json.NewDecoder(res.Body).Decode(&e); err != nil {
			return "", err
		}
		if res.StatusCode != httpapi.Status(e.Code) {
			return "", fmt.Errorf("HTTP %d for code %s", res.StatusCode, e.Code)
		}
		return e.Code, nil
	}}
}
