package facetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
)

// ImageHandler is a Handler that builds images with its progress streamed
// (the daemon's router; lineapi's and httpapi's ImageBuilder).
type ImageHandler interface {
	Handler
	BuildImage(ctx context.Context, req api.Request, progress func(string) error) (api.Response, error)
}

// ImageFace is a client that streams an image build's progress (both Go
// clients).
type ImageFace interface {
	Face
	BuildImage(ctx context.Context, req api.Request, progress func(string)) (api.Response, error)
}

// StandInBuilder writes a stand-in for mmdebstrap (a test double beside
// the real one, which internal/image's TestBuildDebian runs) and returns
// its path: it prints a line naming its target, makes a small root there
// and exits 0. The image store runs it as it runs mmdebstrap (as root,
// inside unshare), so the faces' image scenarios need root, not the
// network or minutes of a real build.
func StandInBuilder(t testing.TB) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "mmdebstrap")
	script := `#!/bin/sh
set -e
for a; do target=$prev; prev=$a; done
echo "I: stand-in build of $target"
mkdir -p "$target/usr/bin" "$target/etc"
echo stand-in > "$target/etc/os-release"
echo "I: stand-in done"
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

var imageScenarios = []scenario{
	{"ImageBuild", testImageBuild},
	{"ImageRemove", testImageRemove},
	{"ImageBadInput", testImageBadInput},
}

// RunImages runs the image scenarios against a fresh target from
// newTarget, whose Handler must be an ImageHandler building with
// StandInBuilder's script, served by start; the face's client must be an
// ImageFace.
func RunImages(t *testing.T, newTarget func(t *testing.T) Target, start StartHandler) {
	for _, sc := range imageScenarios {
		t.Run(sc.name, func(t *testing.T) {
			tg := newTarget(t)
			if _, ok := tg.Handler.(ImageHandler); !ok {
				t.Fatalf("facetest: %T builds no images", tg.Handler)
			}
			s := start(t, tg.Handler)
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			sc.fn(t, ctx, s, env{base: tg.Base, version: tg.Version})
		})
	}
}

func imageFace(t *testing.T, s Setup) ImageFace {
	t.Helper()
	f, ok := s.Face.(ImageFace)
	if !ok {
		t.Fatalf("facetest: the face's client %T cannot stream an image build", s.Face)
	}
	return f
}

func findImage(ims []api.Image, name string) (api.Image, bool) {
	i := slices.IndexFunc(ims, func(im api.Image) bool { return im.Name == name })
	if i < 0 {
		return api.Image{}, false
	}
	return ims[i], true
}

// testImageBuild: a build streams its builder's progress and replies with
// the image; the same inputs again are cached (one progress line, the
// same id); other inputs under another name make another image; the
// collected form (Do) gives the same reply; image_list lists both.
func testImageBuild(t *testing.T, ctx context.Context, s Setup, e env) {
	f := imageFace(t, s)
	req := api.Request{Op: api.OpImageBuild, Image: "img-a", Packages: []string{"hello"}}
	checkRequest(t, req)
	var lines []string
	built, err := f.BuildImage(ctx, req, func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatalf("image_build: %v", err)
	}
	checkReply(t, api.OpImageBuild, built)
	im := built.Image
	if im == nil || im.Name != "img-a" || im.ID == "" || built.Cached || !slices.Equal(im.Packages, []string{"hello"}) || im.Variant != "minbase" {
		t.Fatalf("image_build: %+v", built)
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "I: stand-in build of ") }) {
		t.Errorf("the builder's output is not in the progress: %q", lines)
	}
	lines = nil
	again, err := f.BuildImage(ctx, req, func(l string) { lines = append(lines, l) })
	if err != nil || !again.Cached || again.Image == nil || again.Image.ID != im.ID {
		t.Fatalf("the same build again: %+v, %v; want cached, id %s", again, err, im.ID)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "cached") {
		t.Errorf("a cached build's progress: %q", lines)
	}

	other := mustDo(t, ctx, s, api.Request{Op: api.OpImageBuild, Image: "img-b"})
	if other.Image == nil || other.Image.Name != "img-b" || other.Image.ID == im.ID || other.Cached {
		t.Fatalf("collected image_build of other inputs: %+v", other)
	}
	l := mustDo(t, ctx, s, api.Request{Op: api.OpImageList})
	a, okA := findImage(l.Images, "img-a")
	b, okB := findImage(l.Images, "img-b")
	if !okA || !okB || a.ID != im.ID || b.ID != other.Image.ID || a.SizeBytes <= 0 {
		t.Fatalf("image_list: %+v", l.Images)
	}
}

// testImageRemove: image_rm removes the name (the list no longer has it,
// a second removal is not_found), and leaves the other names.
func testImageRemove(t *testing.T, ctx context.Context, s Setup, e env) {
	mustDo(t, ctx, s, api.Request{Op: api.OpImageBuild, Image: "gone"})
	mustDo(t, ctx, s, api.Request{Op: api.OpImageBuild, Image: "kept", Packages: []string{"hello"}})
	r := mustDo(t, ctx, s, api.Request{Op: api.OpImageRm, Image: "gone"})
	if r.Image == nil || r.Image.Name != "gone" {
		t.Fatalf("image_rm: %+v", r)
	}
	l := mustDo(t, ctx, s, api.Request{Op: api.OpImageList})
	if _, ok := findImage(l.Images, "gone"); ok {
		t.Fatalf("image_list after image_rm: %+v", l.Images)
	}
	if _, ok := findImage(l.Images, "kept"); !ok {
		t.Fatalf("image_rm removed another name: %+v", l.Images)
	}
	_, err := s.Face.Do(ctx, api.Request{Op: api.OpImageRm, Image: "gone"})
	wantErr(t, err, api.ErrNotFound, "image_rm of a removed image")
}

// testImageBadInput: names and packages that are not ones are bad
// requests on both verbs, and build nothing.
func testImageBadInput(t *testing.T, ctx context.Context, s Setup, e env) {
	f := imageFace(t, s)
	for _, tc := range []struct {
		req  api.Request
		want error
	}{
		{api.Request{Op: api.OpImageBuild}, api.ErrBadRequest},
		{api.Request{Op: api.OpImageBuild, Image: "-x"}, api.ErrBadRequest},
		{api.Request{Op: api.OpImageBuild, Image: "host"}, api.ErrBadRequest},
		{api.Request{Op: api.OpImageBuild, Image: "p", Packages: []string{"Not A Package"}}, api.ErrBadRequest},
		{api.Request{Op: api.OpImageBuild, Image: "v", Variant: "--hook-dir=/"}, api.ErrBadRequest},
		{api.Request{Op: api.OpImageRm, Image: "host"}, api.ErrBadRequest},
		{api.Request{Op: api.OpImageRm, Image: "a:b"}, api.ErrBadRequest},
		{api.Request{Op: api.OpImageRm, Image: "no-such-image"}, api.ErrNotFound},
	} {
		what := fmt.Sprintf("%s %q %v %q", tc.req.Op, tc.req.Image, tc.req.Packages, tc.req.Variant)
		_, err := s.Face.Do(ctx, tc.req)
		wantErr(t, err, tc.want, what)
		if tc.req.Op == api.OpImageBuild {
			_, err := f.BuildImage(ctx, tc.req, func(l string) { t.Errorf("%s: progress %q", what, l) })
			wantErr(t, err, tc.want, what+" (streamed)")
		}
	}
	if l := mustDo(t, ctx, s, api.Request{Op: api.OpImageList}); len(l.Images) != 0 {
		t.Fatalf("refused builds made images: %+v", l.Images)
	}
}
