package image_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/image"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// fakeBuilder writes a stand-in for mmdebstrap (a test double beside the
// real one, which TestBuildDebian runs): it logs each run to a file,
// makes a small root in its target, sleeps and exits with code.
func fakeBuilder(t *testing.T, sleep string, code int) (path, runs string) {
	t.Helper()
	dir := t.TempDir()
	runs = filepath.Join(dir, "runs")
	path = filepath.Join(dir, "mmdebstrap")
	script := fmt.Sprintf(`#!/bin/bash
set -e
target="${@:$#-1:1}"
echo "$*" >> %q
echo "I: fake build of $target"
mkdir -p "$target/usr/bin" "$target/etc"
echo fake > "$target/etc/os-release"
sleep %s
echo "I: fake done"
exit %d
`, runs, sleep, code)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, runs
}

func newStore(t *testing.T, mm string) *image.Store {
	t.Helper()
	testenv.NeedRoot(t, "mmdebstrap's root mode and unshare")
	testenv.NeedCommand(t, testenv.Root, "unshare")
	s, err := image.New(image.Config{Dir: filepath.Join(t.TempDir(), "images"), Mmdebstrap: mm, Sources: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func runCount(t *testing.T, runs string) int {
	t.Helper()
	b, err := os.ReadFile(runs)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// leftovers lists what is in the store's directory besides names, locks
// and published images.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".build-") {
			out = append(out, e.Name())
		}
	}
	return out
}

func TestCachedByInputs(t *testing.T) {
	mm, runs := fakeBuilder(t, "0", 0)
	s := newStore(t, mm)
	ctx := context.Background()
	var lines []string
	im, cached, err := s.Build(ctx, image.Spec{Name: "a", Packages: []string{"hello", "hello"}}, func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatal(err)
	}
	if cached || runCount(t, runs) != 1 {
		t.Fatalf("first build: cached %v, runs %d", cached, runCount(t, runs))
	}
	if !slices.Contains(lines, "I: fake done") {
		t.Errorf("the builder's output is not in the progress: %q", lines)
	}
	if b, err := os.ReadFile(filepath.Join(im.Root, "etc/os-release")); err != nil || string(b) != "fake\n" {
		t.Fatalf("root: %q %v", b, err)
	}
	if im.Suite != image.DefaultSuite || im.Variant != image.DefaultVariant || !slices.Equal(im.Packages, []string{"hello"}) || im.Mirror != image.DefaultMirror {
		t.Errorf("image %+v: want the defaults and one hello", im)
	}
	// The same inputs (another name, another order): cached, no run.
	lines = nil
	im2, cached, err := s.Build(ctx, image.Spec{Name: "b", Packages: []string{"hello"}}, func(l string) { lines = append(lines, l) })
	if err != nil || !cached || im2.ID != im.ID || runCount(t, runs) != 1 {
		t.Fatalf("second build: cached %v id %s (want %s) runs %d err %v", cached, im2.ID, im.ID, runCount(t, runs), err)
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "cached") {
		t.Errorf("a cached build says %q, want one line saying it is cached", lines)
	}
	// Each input changes the id.
	for _, sp := range []image.Spec{
		{Name: "a", Packages: []string{"hello", "jq"}},
		{Name: "a", Packages: []string{"hello"}, Suite: "trixie"},
		{Name: "a", Packages: []string{"hello"}, Variant: "apt"},
		{Name: "a", Packages: []string{"hello"}, Mirror: "http://mirror.example/debian"},
		{Name: "a", Packages: []string{"hello"}, HookID: "v1", Hook: func(context.Context, string) error { return nil }},
	} {
		n, err := s.Normalize(sp)
		if err != nil {
			t.Fatal(err)
		}
		if image.ID(n) == im.ID {
			t.Errorf("%+v has the id of %+v", sp, im)
		}
	}
	// Moving a name drops what it held only when no other name holds it.
	if _, _, err := s.Build(ctx, image.Spec{Name: "a", Packages: []string{"jq"}}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(im.Root); err != nil {
		t.Fatalf("b still names %s, its root is gone: %v", im.ID, err)
	}
	if err := s.Remove("b"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(im.Root)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("no name holds %s, its files stay: %v", im.ID, err)
	}
	list, err := s.List()
	if err != nil || len(list) != 1 || list[0].Name != "a" || !slices.Equal(list[0].Packages, []string{"jq"}) {
		t.Fatalf("list: %+v %v", list, err)
	}
	if _, err := s.Get("b"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("get of a removed image: %v, want not found", err)
	}
	if err := s.Remove("b"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("second remove: %v, want not found", err)
	}
	if l := leftovers(t, filepath.Join(filepath.Dir(filepath.Dir(im.Root)))); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}

func TestBadSpec(t *testing.T) {
	s, err := image.New(image.Config{Dir: t.TempDir(), Sources: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range []image.Spec{
		{Name: ""}, {Name: "host"}, {Name: "../x"}, {Name: ".x"},
		{Name: "a", Packages: []string{"Bad"}}, {Name: "a", Packages: []string{"a;rm"}}, {Name: "a", Packages: []string{"-x"}},
		{Name: "a", Suite: "../x"}, {Name: "a", Variant: "huge"}, {Name: "a", Mirror: "ftp://x"}, {Name: "a", Mirror: "http://x y"},
		{Name: "a", HookID: "x"}, {Name: "a", Hook: func(context.Context, string) error { return nil }},
	} {
		if _, _, err := s.Build(context.Background(), sp, nil); !errors.Is(err, api.ErrBadRequest) {
			t.Errorf("%+v: %v, want bad request", sp, err)
		}
	}
	for _, n := range []string{"", "host", "a/b"} {
		if _, err := s.Get(n); !errors.Is(err, api.ErrBadRequest) {
			t.Errorf("get %q: %v, want bad request", n, err)
		}
	}
}

// A failed build, a failed hook and a cancelled one leave no image and
// no directory behind.
func TestFailedBuildLeavesNothing(t *testing.T) {
	ctx := context.Background()
	t.Run("builder fails", func(t *testing.T) {
		mm, _ := fakeBuilder(t, "0", 3)
		s := newStore(t, mm)
		_, _, err := s.Build(ctx, image.Spec{Name: "x"}, nil)
		if err == nil || !strings.Contains(err.Error(), "I: fake done") {
			t.Fatalf("err %v, want the builder's failure with its last lines", err)
		}
		checkEmpty(t, s)
	})
	t.Run("hook fails", func(t *testing.T) {
		mm, _ := fakeBuilder(t, "0", 0)
		s := newStore(t, mm)
		boom := errors.New("boom")
		_, _, err := s.Build(ctx, image.Spec{Name: "x", HookID: "agent-1", Hook: func(_ context.Context, root string) error {
			if _, err := os.Stat(filepath.Join(root, "etc/os-release")); err != nil {
				return err
			}
			return boom
		}}, nil)
		if !errors.Is(err, boom) {
			t.Fatalf("err %v, want the hook's", err)
		}
		checkEmpty(t, s)
	})
	t.Run("cancelled", func(t *testing.T) {
		mm, runs := fakeBuilder(t, "30", 0)
		s := newStore(t, mm)
		cctx, cancel := context.WithCancel(ctx)
		started := make(chan struct{})
		var once sync.Once
		go func() { <-started; cancel() }()
		t0 := time.Now()
		_, _, err := s.Build(cctx, image.Spec{Name: "x"}, func(l string) {
			if strings.HasPrefix(l, "I: fake build") {
				once.Do(func() { close(started) })
			}
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want canceled", err)
		}
		if d := time.Since(t0); d > 10*time.Second {
			t.Errorf("the cancelled build took %v to end", d)
		}
		if runCount(t, runs) != 1 {
			t.Fatal("the builder did not run")
		}
		checkEmpty(t, s)
	})
}

func checkEmpty(t *testing.T, s *image.Store) {
	t.Helper()
	if _, err := s.Get("x"); !errors.Is(err, api.ErrNotFound) {
		t.Errorf("get after a failed build: %v, want not found", err)
	}
	list, err := s.List()
	if err != nil || len(list) != 0 {
		t.Errorf("list after a failed build: %+v %v", list, err)
	}
	dir := s.Dir()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() && e.Name() != "names" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

// Concurrent builds of the same inputs run the builder once; the others
// wait and find the image cached.
func TestConcurrentBuilds(t *testing.T) {
	mm, runs := fakeBuilder(t, "0.5", 0)
	s := newStore(t, mm)
	var wg sync.WaitGroup
	ids := make([]string, 4)
	cached := make([]bool, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Go(func() {
			var im image.Image
			im, cached[i], errs[i] = s.Build(context.Background(), image.Spec{Name: fmt.Sprintf("c%d", i), Packages: []string{"hello"}}, nil)
			ids[i] = im.ID
		})
	}
	wg.Wait()
	nCached := 0
	for i := range 4 {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if ids[i] != ids[0] {
			t.Errorf("ids %v differ", ids)
		}
		if cached[i] {
			nCached++
		}
	}
	if runCount(t, runs) != 1 || nCached != 3 {
		t.Fatalf("builder ran %d times, %d builds cached; want 1 and 3", runCount(t, runs), nCached)
	}
}

// A build cut short by a crash leaves its directory; the next store
// removes it.
func TestNewRemovesCutShortBuilds(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, ".build-0123456789abcdef01234567-xyz", "rootfs", "etc")
	if err := os.MkdirAll(junk, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := image.New(image.Config{Dir: dir, Sources: []string{}}); err != nil {
		t.Fatal(err)
	}
	if l := leftovers(t, dir); len(l) > 0 {
		t.Fatalf("left behind: %v", l)
	}
}

func TestMirror(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	deb822 := write("debian.sources", `Types: deb
# a comment
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
`)
	oneLine := write("local.list", "# mirror\ndeb [arch=amd64 signed-by=/k.gpg] http://mirror.local/debian/ trixie main\ndeb-src http://src/debian trixie main\n")
	other := write("other.list", "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n")
	for _, c := range []struct {
		sources []string
		suite   string
		want    string
	}{
		{[]string{deb822}, "bookworm", "http://deb.debian.org/debian"},
		{[]string{oneLine, deb822}, "trixie", "http://mirror.local/debian"},
		{[]string{oneLine, deb822}, "bookworm", "http://deb.debian.org/debian"},
		{[]string{deb822}, "trixie", "http://deb.debian.org/debian"},
		{[]string{other}, "bookworm", image.DefaultMirror},
		{nil, "bookworm", image.DefaultMirror},
		{[]string{filepath.Join(dir, "missing.list")}, "bookworm", image.DefaultMirror},
	} {
		if got := image.Mirror(c.sources, c.suite); got != c.want {
			t.Errorf("Mirror(%v, %s) = %s, want %s", c.sources, c.suite, got, c.want)
		}
	}
}

// TestBuildDebian builds a real image, minbase and hello, from Debian's
// mirror as apt here is configured, into the test run's shared cache.
func TestBuildDebian(t *testing.T) {
	testenv.NeedRoot(t, "mmdebstrap's root mode")
	testenv.NeedCommand(t, testenv.Mmdebstrap, "mmdebstrap")
	s, err := image.New(image.Config{Dir: testenv.ImageCache()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var lines []string
	var mu sync.Mutex
	// The spec the daemon's tests use too (internal/daemon image_test.go).
	im, cached, err := s.Build(ctx, image.Spec{Name: "test-hello", Packages: []string{"hello"}}, func(l string) {
		mu.Lock()
		lines = append(lines, l)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if !cached && !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "I: ") }) {
		t.Errorf("a build showed no mmdebstrap progress: %q", lines)
	}
	t.Logf("image %s (%s), cached %v, %d MiB", im.Name, im.ID, cached, im.SizeBytes>>20)
	for _, p := range []string{"usr/bin/hello", "usr/bin/apt-get", "etc/debian_version"} {
		if _, err := os.Stat(filepath.Join(im.Root, p)); err != nil {
			t.Errorf("the image lacks %s: %v", p, err)
		}
	}
	t0 := time.Now()
	again, cached, err := s.Build(ctx, image.Spec{Name: "test-hello", Packages: []string{"hello"}}, nil)
	if err != nil || !cached || again.ID != im.ID {
		t.Fatalf("second build: cached %v, id %s (want %s), %v", cached, again.ID, im.ID, err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("a cached build took %v", d)
	}
}

// BenchmarkBuildCached is a build whose inputs were built before: the
// locks, a stat and the name's atomic update. Run:
//
//	go test -run '^$' -bench BuildCached -benchtime 200x ./internal/image/
func BenchmarkBuildCached(b *testing.B) {
	testenv.NeedRoot(b, "mmdebstrap's root mode and unshare")
	dir := b.TempDir()
	mm := filepath.Join(dir, "mmdebstrap")
	if err := os.WriteFile(mm, []byte("#!/bin/sh\nmkdir -p \"$6/etc\"\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	s, err := image.New(image.Config{Dir: filepath.Join(dir, "images"), Mmdebstrap: mm, Sources: []string{}})
	if err != nil {
		b.Fatal(err)
	}
	spec := image.Spec{Name: "a", Packages: []string{"hello"}}
	if _, _, err := s.Build(context.Background(), spec, nil); err != nil {
		b.Fatal(err)
	}
	var d []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if _, cached, err := s.Build(context.Background(), spec, nil); err != nil || !cached {
			b.Fatal(cached, err)
		}
		d = append(d, time.Since(t0))
	}
	slices.Sort(d)
	b.ReportMetric(float64(d[len(d)/2])/1e6, "p50-ms")
}

// TestAttackBuildArguments: what reaches mmdebstrap's command line from a
// request (name, suite, variant, packages) cannot be an option, a hook, a
// path, an apt pattern or shell syntax; each is refused before anything
// runs (no mmdebstrap is installed here: the refusal is Normalize's).
func TestAttackBuildArguments(t *testing.T) {
	s, err := image.New(image.Config{Dir: t.TempDir(), Sources: []string{}, Mmdebstrap: "/nonexistent/mmdebstrap"})
	if err != nil {
		t.Fatal(err)
	}
	bad := []image.Spec{
		{Name: "a", Packages: []string{"--customize-hook=chroot \"$1\" sh"}},
		{Name: "a", Packages: []string{"a,--customize-hook=x"}},
		{Name: "a", Packages: []string{"/tmp/evil.deb"}}, {Name: "a", Packages: []string{"./evil.deb"}},
		{Name: "a", Packages: []string{"?name(.*)"}}, {Name: "a", Packages: []string{"bash=1.0"}}, {Name: "a", Packages: []string{"bash/sid"}},
		{Name: "a", Packages: []string{"a$(id)"}}, {Name: "a", Packages: []string{"a b"}}, {Name: "a", Packages: []string{"a\n--hook-dir=/"}},
		{Name: "a", Suite: "--hook-dir=/tmp"}, {Name: "a", Suite: "-v"}, {Name: "a", Suite: "bookworm /etc"}, {Name: "a", Suite: "http://evil/"},
		{Name: "a", Variant: "--mode=unshare"}, {Name: "a", Variant: "minbase --customize-hook=x"},
		{Name: "a", Mirror: "http://evil/\ndeb [trusted=yes] http://evil/ sid main"}, {Name: "a", Mirror: "-"}, {Name: "a", Mirror: "/etc/apt/sources.list"},
		{Name: "-x"}, {Name: "/etc"}, {Name: "a/../../b"}, {Name: ".."}, {Name: strings.Repeat("a", 65)}, {Name: ".lock"}, {Name: ".build-x"},
	}
	for _, sp := range bad {
		if _, _, err := s.Build(context.Background(), sp, func(l string) { t.Errorf("%+v: a build started: %s", sp, l) }); !errors.Is(err, api.ErrBadRequest) {
			t.Errorf("%+v: %v, want bad request", sp, err)
		}
	}
	// The hash's inputs cannot be shifted from one field into another to
	// collide with another image's id.
	a, _ := s.Normalize(image.Spec{Name: "a", Suite: "bookworm", Packages: []string{"ab"}, Mirror: "http://m"})
	b, _ := s.Normalize(image.Spec{Name: "a", Suite: "bookworm", Packages: []string{"a", "b"}, Mirror: "http://m"})
	if image.ID(a) == image.ID(b) {
		t.Errorf("packages [ab] and [a b] share id %s", image.ID(a))
	}
}
