package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/fusemount"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// imageDaemon composes a daemon whose images are the test run's shared
// cache (testenv.ImageCache: its $ARBOR_HOME/images links there, so the
// test image is built once per run) and serves it on a socket.
func imageDaemon(t *testing.T) (*client.Client, string) {
	t.Helper()
	home, base := tempDir(t), tempDir(t)
	if err := os.MkdirAll(testenv.ImageCache(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(testenv.ImageCache(), filepath.Join(home, "images")); err != nil {
		t.Fatal(err)
	}
	r, closeAll, err := compose(home, nil, "", &fusemount.Aborter{}, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	c := client.New(serveLine(t, r))
	t.Cleanup(func() { c.Close() })
	return c, base
}

// TestJailTreeOnImage: arbor image build through the daemon (progress
// streamed, a second build cached), a jail tree on the image runs the
// image's programs (hello, which the image has and the host need not),
// the image's files are read-only inside, and an image in use can be
// neither removed nor rebuilt from other inputs.
func TestJailTreeOnImage(t *testing.T) {
	needJail(t)
	testenv.NeedCommand(t, testenv.Mmdebstrap, "mmdebstrap")
	c, base := imageDaemon(t)
	writeFile(t, filepath.Join(base, "f"), "from the base\n")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	must := mustDo(t, ctx, c)

	// The spec internal/image's TestBuildDebian builds too: minbase and hello.
	var lines []string
	built, err := c.BuildImage(ctx, api.Request{Image: "test-hello", Packages: []string{"hello"}}, func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatal(err)
	}
	if len(lines) == 0 || built.Image == nil || built.Image.Name != "test-hello" || built.Image.Variant != "minbase" {
		t.Fatalf("image_build: %+v, progress %q", built, lines)
	}
	t.Logf("image %s (cached %v): %d progress lines, %d MiB", built.Image.ID, built.Cached, len(lines), built.Image.SizeBytes>>20)
	lines = nil
	again, err := c.BuildImage(ctx, api.Request{Image: "test-hello", Packages: []string{"hello"}}, func(l string) { lines = append(lines, l) })
	if err != nil || !again.Cached || again.Image.ID != built.Image.ID {
		t.Fatalf("second image_build: %+v %v", again, err)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "cached") {
		t.Errorf("a cached build's progress: %q", lines)
	}
	if l := must(api.Request{Op: api.OpImageList}); !containsImage(l.Images, "test-hello") {
		t.Fatalf("image_list: %+v", l.Images)
	}

	for _, bad := range []struct {
		req  api.Request
		want error
	}{
		{api.Request{Op: api.OpTreeCreate, Base: base, Backend: "jail", Image: "no-such-image"}, api.ErrNotFound},
		{api.Request{Op: api.OpTreeCreate, Base: base, Backend: "dir", Image: "test-hello"}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeCreate, Base: base, Backend: "dir", Network: "outbound"}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeCreate, Base: base, Backend: "jail", Network: "everywhere"}, api.ErrBadRequest},
		{api.Request{Op: api.OpTreeCreate, Base: base, Backend: "jail", Image: "../x"}, api.ErrBadRequest},
		{api.Request{Op: api.OpImageRm, Image: "no-such-image"}, api.ErrNotFound},
		{api.Request{Op: api.OpImageRm, Image: "host"}, api.ErrBadRequest},
	} {
		if _, err := c.Do(ctx, bad.req); !errors.Is(err, bad.want) {
			t.Errorf("%+v: %v, want %v", bad.req, err, bad.want)
		}
	}
	if _, err := c.BuildImage(ctx, api.Request{Image: "x", Packages: []string{"Not A Package"}}, nil); !errors.Is(err, api.ErrBadRequest) {
		t.Errorf("image_build of a bad package name: %v", err)
	}
	if l := must(api.Request{Op: api.OpTreeList}); len(l.Trees) != 0 {
		t.Fatalf("refused creates left trees: %+v", l.Trees)
	}

	tr := must(api.Request{Op: api.OpTreeCreate, TreeID: "img", Base: base, Backend: "jail", Image: "test-hello"})
	if l := must(api.Request{Op: api.OpTreeList}); len(l.Trees) != 1 || l.Trees[0].Image != "test-hello" {
		t.Fatalf("tree_list: %+v", l.Trees)
	}
	child := must(api.Request{Op: api.OpTreeFork, TreeID: "img", SourceID: tr.Root, Label: "c"})
	for _, node := range []string{tr.Root, child.NodeID} {
		out, x, err := shIn(ctx, c, "img", node, `hello; cat /workspace/f
test -e /usr/bin/mmdebstrap && echo HOST-USR
for p in /usr/bin/hello /usr/new /etc/new /var/new /root/new; do (echo x > $p) 2>/dev/null && echo WROTE $p; done
echo w > /workspace/w && echo t > /tmp/t && cat /workspace/w /tmp/t`)
		if err != nil || x.ExitCode != 0 || out != "Hello, world!\nfrom the base\nw\nt\n" {
			t.Errorf("node %s on the image: %q %+v %v", node, out, x, err)
		}
	}
	if _, err := os.Stat("/usr/bin/hello"); err == nil {
		t.Log("the host has hello too: the image's is told apart by the host's mmdebstrap it lacks")
	}

	// In use: neither removed nor rebuilt from other inputs.
	if _, err := c.Do(ctx, api.Request{Op: api.OpImageRm, Image: "test-hello"}); !errors.Is(err, api.ErrBusy) {
		t.Errorf("image_rm of an image in use: %v, want busy", err)
	}
	if _, err := c.BuildImage(ctx, api.Request{Image: "test-hello", Packages: []string{"hello", "jq"}}, nil); !errors.Is(err, api.ErrBusy) {
		t.Errorf("image_build of an image in use from other inputs: %v, want busy", err)
	}
	// Another name for the same inputs: cached, and removed without
	// touching the files the first name holds.
	if r, err := c.BuildImage(ctx, api.Request{Image: "test-hello-2", Packages: []string{"hello"}}, nil); err != nil || !r.Cached {
		t.Fatalf("a second name: %+v %v", r, err)
	}
	must(api.Request{Op: api.OpImageRm, Image: "test-hello-2"})
	if out, _, err := shIn(ctx, c, "img", tr.Root, "hello"); err != nil || out != "Hello, world!\n" {
		t.Fatalf("after removing another name of the image: %q %v", out, err)
	}
	must(api.Request{Op: api.OpTreeDelete, TreeID: "img"})
}

func containsImage(ims []api.Image, name string) bool {
	for _, im := range ims {
		if im.Name == name {
			return true
		}
	}
	return false
}

// TestJailTreeOutbound: a jail tree made with network "outbound" fetches
// from a server on the host's loopback (through pasta's gateway mapping);
// a tree with the default network cannot.
func TestJailTreeOutbound(t *testing.T) {
	needJail(t)
	testenv.NeedCommand(t, testenv.Pasta, "pasta")
	testenv.NeedCommand(t, testenv.Root, "bash")
	gw := testenv.HostGateway(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "served on the host's loopback") }))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	c, base := imageDaemon(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	must := mustDo(t, ctx, c)
	fetch := fmt.Sprintf(`bash -c 'exec 3<>/dev/tcp/%s/%d && printf "GET / HTTP/1.0\r\n\r\n" >&3 && tail -1 <&3'`, gw, port)

	on := must(api.Request{Op: api.OpTreeCreate, TreeID: "on", Base: base, Backend: "jail", Network: "outbound"})
	off := must(api.Request{Op: api.OpTreeCreate, TreeID: "off", Base: tempDir(t), Backend: "jail"})
	if l := must(api.Request{Op: api.OpTreeList}); len(l.Trees) != 2 {
		t.Fatalf("tree_list: %+v", l.Trees)
	} else {
		for _, tr := range l.Trees {
			if want := map[string]string{"on": "outbound", "off": ""}[tr.ID]; tr.Network != want {
				t.Errorf("tree %s: network %q, want %q", tr.ID, tr.Network, want)
			}
		}
	}
	out, x, err := shIn(ctx, c, "on", on.Root, fetch)
	if err != nil || x.ExitCode != 0 || out != "served on the host's loopback\n" {
		t.Fatalf("outbound fetch: %q %+v %v", out, x, err)
	}
	// A child of the live node gets a network of its own.
	child := must(api.Request{Op: api.OpTreeFork, TreeID: "on", SourceID: on.Root, Label: "c"})
	if out, x, err := shIn(ctx, c, "on", child.NodeID, fetch); err != nil || x.ExitCode != 0 || out != "served on the host's loopback\n" {
		t.Fatalf("outbound fetch in a child: %q %+v %v", out, x, err)
	}
	out, x, err = shIn(ctx, c, "off", off.Root, fetch+" 2>&1")
	if err != nil || x.ExitCode == 0 || strings.Contains(out, "served") {
		t.Fatalf("the default network fetched: %q %+v %v", out, x, err)
	}
}
