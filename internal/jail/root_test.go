package jail_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/jail"
	"github.com/arbor-dev/arbor/internal/testenv"
	"golang.org/x/sys/unix"
)

// fakeImage makes an image root in a temporary directory: the host's
// /usr (and /bin, /lib... as the host has them) bound into it, so that
// programs run, and an /etc and /opt of its own with marker files.
func fakeImage(t testing.TB) string {
	t.Helper()
	testenv.NeedRoot(t, "bind mounts")
	root := t.TempDir()
	for _, d := range []string{"usr", "bin", "sbin", "lib", "lib64"} {
		src := "/" + d
		fi, err := os.Lstat(src)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, d)
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, dst); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(dst, unix.MNT_DETACH) })
	}
	for _, f := range []struct{ path, text string }{
		{"etc/image-marker", "from the image\n"},
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"},
		{"opt/tool/README", "an image's own file\n"},
	} {
		p := filepath.Join(root, f.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// What the image has where the sandbox has its own: hidden.
	for _, d := range []string{"tmp", "proc", "dev", "sys", "workspace"} {
		if err := os.MkdirAll(filepath.Join(root, d, "image-junk"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// newConfigManager is newManager with cfg's Root, Outbound and Spares
// (default one).
func newConfigManager(t *testing.T, cfg jail.Config) *jail.Manager {
	t.Helper()
	testenv.NeedRoot(t, "sandboxes need namespaces and cgroups")
	label := fmt.Sprintf("t%d-%s", os.Getpid(), nonName.ReplaceAllString(t.Name(), "_"))
	if len(label) > 64 {
		label = label[:64]
	}
	m, err := jail.New(jail.Config{StateDir: t.TempDir(), Label: label, Spares: cmp.Or(cfg.Spares, 1), Root: cfg.Root, Outbound: cfg.Outbound})
	if errors.Is(err, api.ErrUnavailable) {
		testenv.Missing(t, testenv.Cgroup, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return m
}

// A manager with Root runs its sandboxes on the image's root, read-only,
// with /workspace, /tmp, /proc and /dev its own.
func TestImageRoot(t *testing.T) {
	root := fakeImage(t)
	m := newConfigManager(t, jail.Config{Root: root})
	if err := m.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"img-spare", "img-cold"} { // the spare's, then a cold start
		s, ws, _ := start(t, m, name)
		if err := os.WriteFile(filepath.Join(ws, "f"), []byte("ws\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, errs, st := sh(t, s, `cat /etc/image-marker /opt/tool/README /workspace/f
test -e /etc/hostname && echo HOST-ETC
ls /tmp /workspace /dev | grep -c image-junk
echo x > /opt/tool/new 2>/dev/null && echo WROTE-OPT
echo x > /etc/new 2>/dev/null && echo WROTE-ETC
echo x > /usr/new 2>/dev/null && echo WROTE-USR
echo ok > /tmp/t && echo ok > /workspace/w && cat /tmp/t /workspace/w`)
		want := "from the image\nan image's own file\nws\n0\nok\nok\n"
		if out != want || st.Code != 0 {
			t.Errorf("%s: out %q (want %q) err %q status %v", name, out, want, errs, st)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "opt/tool/new")); err == nil {
		t.Error("a sandbox wrote into the image")
	}
}

func TestImageRootBadConfig(t *testing.T) {
	testenv.NeedRoot(t, "jail.New needs root")
	for _, c := range []jail.Config{
		{StateDir: t.TempDir(), Root: "relative"},
		{StateDir: t.TempDir(), Root: filepath.Join(t.TempDir(), "missing")},
		{StateDir: t.TempDir(), Root: t.TempDir()}, // empty
		{StateDir: t.TempDir(), Root: "/", HostDirs: []string{"/usr"}},
	} {
		if m, err := jail.New(c); !errors.Is(err, api.ErrBadRequest) {
			if m != nil {
				m.Close()
			}
			t.Errorf("%+v: %v, want bad request", c, err)
		}
	}
}

// loopbackServer answers every connection on 127.0.0.1 with a line.
func loopbackServer(t *testing.T, line string) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(line))
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().(*net.TCPAddr).Port
}

// FetchScript reads one line from gw:port with bash's /dev/tcp.
func fetchScript(gw string, port int) string {
	return fmt.Sprintf(`exec 3<>/dev/tcp/%s/%d && head -1 <&3`, gw, port)
}

// Outbound network reaches a server on the host's loopback through
// pasta's gateway mapping; without it the same fetch fails. pasta is in
// the sandbox's cgroup and dies with it.
func TestOutbound(t *testing.T) {
	testenv.NeedRoot(t, "sandboxes")
	testenv.NeedCommand(t, testenv.Pasta, "pasta")
	testenv.NeedCommand(t, testenv.Root, "bash")
	gw := testenv.HostGateway(t)
	port := loopbackServer(t, "hello from the host\n")
	m := newManager(t)
	off, _, _ := start(t, m, "net-off")
	out, _, st := sh(t, off, "bash -c '"+fetchScript(gw, port)+"'")
	if st.Code == 0 || strings.Contains(out, "hello") {
		t.Fatalf("without outbound network the fetch succeeded: %q %v", out, st)
	}

	// A spare's network (made ahead of need), and a cold start's.
	for _, spares := range []int{1, -1} {
		t.Run(fmt.Sprintf("spares=%d", spares), func(t *testing.T) { outbound(t, spares, gw, port) })
	}
}

// outbound checks a sandbox with outbound network of a manager with
// that many spares.
func outbound(t *testing.T, spares int, gw string, port int) {
	ctx := context.Background()
	mo := newConfigManager(t, jail.Config{Outbound: true, Spares: spares})
	if err := mo.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := mo.Start(ctx, jail.Spec{Name: "net-on", Workspace: t.TempDir(), Tmp: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	out, errs, st := sh(t, s, "bash -c '"+fetchScript(gw, port)+"'")
	if out != "hello from the host\n" || st.Code != 0 {
		t.Fatalf("spares %d: outbound fetch: out %q err %q status %v", spares, out, errs, st)
	}
	// The sandbox's own loopback is not the host's.
	out, _, _ = sh(t, s, fmt.Sprintf("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d' 2>&1; echo $?", port))
	if strings.HasSuffix(out, "\n0\n") || out == "0\n" {
		t.Errorf("spares %d: the sandbox's 127.0.0.1 reached the host's: %q", spares, out)
	}
	// pasta runs in the sandbox's cgroup (a spare's moved with its
	// init), and dies with the sandbox.
	pids := pastaPids(t, s)
	if len(pids) != 1 {
		t.Fatalf("spares %d: pasta processes in the sandbox's cgroup: %v", spares, pids)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for unix.Kill(pids[0], 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("spares %d: pasta %d outlived its sandbox", spares, pids[0])
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pastaPids are the pids of the pasta processes in s's cgroups.
func pastaPids(t *testing.T, s *jail.Sandbox) []int {
	t.Helper()
	var out []int
	seen := map[int]bool{}
	for _, dir := range s.CgroupPaths() {
		b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(b)) {
			var pid int
			fmt.Sscan(f, &pid)
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			if c := strings.TrimSpace(string(comm)); (c == "pasta" || strings.HasPrefix(c, "passt")) && !seen[pid] {
				seen[pid] = true
				out = append(out, pid)
			}
		}
	}
	return out
}

// BenchmarkStartRoot is the start of a sandbox (Start until ready, a
// spare kept) on the host's root, on an image's root, and with outbound
// network (pasta started and the namespace configured). Run:
//
//	go test -run '^$' -bench StartRoot -benchtime 40x ./internal/jail/
func BenchmarkStartRoot(b *testing.B) {
	testenv.NeedRoot(b, "sandboxes")
	for _, c := range []struct {
		name     string
		image    bool
		outbound bool
	}{{"host", false, false}, {"image", true, false}, {"outbound", false, true}} {
		b.Run(c.name, func(b *testing.B) {
			cfg := jail.Config{StateDir: b.TempDir(), Label: fmt.Sprintf("b%d-%s", os.Getpid(), c.name), Spares: 1, Outbound: c.outbound}
			if c.image {
				cfg.Root = fakeImage(b)
			}
			if c.outbound {
				if err := jail.PastaAvailable(""); err != nil {
					testenv.Missing(b, testenv.Pasta, err.Error())
				}
			}
			m, err := jail.New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer m.Close()
			ws, tmp := b.TempDir(), b.TempDir()
			var s samples
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				if err := m.Warm(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				t0 := time.Now()
				sb, err := m.Start(context.Background(), jail.Spec{Name: fmt.Sprintf("s%d", i), Workspace: ws, Tmp: tmp})
				if err != nil {
					b.Fatal(err)
				}
				s = append(s, time.Since(t0))
				b.StopTimer()
				if err := sb.Stop(context.Background()); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			s.report(b)
		})
	}
}
