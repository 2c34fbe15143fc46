package jail

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/api"
)

// Outbound network: pasta (from passt) attaches to the sandbox's network
// namespace, copies the host's address and routes onto a tap interface
// there, and carries the sandbox's connections out through ordinary
// sockets of its own. It also maps the gateway's address to the host's
// loopback (connecting to the gateway reaches 127.0.0.1 on the host).
// No port is forwarded in (-t/-u none) and the sandbox's own loopback is
// not mapped to the host's (-T/-U none).
//
// Names resolve as the root's /etc/resolv.conf says: a resolver on the
// host's loopback (systemd-resolved's 127.0.0.53) is not the sandbox's.
//
// pasta is a host process the sandbox owns: it is cloned into the
// sandbox's cgroups (so cgroup.kill, Freeze and the limits take it with
// the sandbox's processes), it dies with its caller's thread
// (Pdeathsig), and Stop kills and reaps it.

// pastaReadyTimeout bounds the wait for pasta to configure the namespace.
const pastaReadyTimeout = 5 * time.Second

// netHelper is a sandbox's pasta.
type netHelper struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed when it has been reaped
	stderr *bytes.Buffer // guarded by done: read only after it
}

// PastaAvailable says whether outbound network can be given here: nil,
// or why not.
func PastaAvailable(path string) error {
	if path == "" {
		path = "pasta"
	}
	if _, err := exec.LookPath(path); err != nil {
		return fmt.Errorf("%w: outbound network needs pasta (apt-get install passt): %w", api.ErrUnavailable, err)
	}
	return nil
}

// startNetwork starts pasta, in cgroups g, on the network namespace of
// init pid and waits until the namespace has the host's default routes.
func (m *Manager) startNetwork(g *group, pid int) (_ *netHelper, err error) {
	path := m.cfg.Pasta
	if path == "" {
		path = "pasta"
	}
	bin, err := exec.LookPath(path)
	if err != nil {
		return nil, PastaAvailable(path)
	}
	// pasta gets the namespace as an inherited descriptor: as root with
	// its capabilities cut it may not open /proc/<init>/ns/net itself.
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, fmt.Errorf("network namespace: %w", err)
	}
	defer ns.Close()
	h := &netHelper{done: make(chan struct{}), stderr: &bytes.Buffer{}}
	h.cmd = &exec.Cmd{
		Path: bin,
		Args: []string{"pasta", "--foreground", "--quiet", "--runas", "0", "--config-net",
			"--netns", "/proc/self/fd/3", "--netns-only",
			"-t", "none", "-u", "none", "-T", "none", "-U", "none"},
		ExtraFiles:  []*os.File{ns},
		Stderr:      &capped{b: h.stderr, max: 4 << 10},
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	if g.v2 != nil {
		dir, err := g.v2Dir("")
		if err != nil {
			return nil, fmt.Errorf("open cgroup: %w", err)
		}
		defer dir.Close()
		h.cmd.SysProcAttr.UseCgroupFD, h.cmd.SysProcAttr.CgroupFD = true, int(dir.Fd())
	}
	if err := m.fork(h.cmd); err != nil {
		return nil, fmt.Errorf("start pasta: %w", err)
	}
	go func() { h.cmd.Wait(); close(h.done) }()
	defer func() {
		if err != nil {
			h.stop()
		}
	}()
	if err := g.attachV1(h.cmd.Process.Pid); err != nil {
		return nil, fmt.Errorf("pasta into the v1 cgroups: %w", err)
	}
	// Ready when the namespace has the default routes the host has.
	want, err := defaultRoutes(os.Getpid())
	if err != nil {
		return nil, err
	}
	if !want[0] && !want[1] {
		return nil, fmt.Errorf("%w: outbound network: the host has no default route", api.ErrUnavailable)
	}
	deadline := time.Now().Add(pastaReadyTimeout)
	for {
		have, err := defaultRoutes(pid)
		if err != nil {
			return nil, err
		}
		if have[0] == want[0] && have[1] == want[1] {
			return h, nil
		}
		select {
		case <-h.done:
			return nil, fmt.Errorf("pasta exited: %s: %s", h.cmd.ProcessState, pastaMessage(h.stderr.String()))
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("pasta did not configure the network within %v", pastaReadyTimeout)
		}
	}
}

// stop kills pasta and reaps it.
func (h *netHelper) stop() {
	if h == nil {
		return
	}
	h.cmd.Process.Kill()
	<-h.done
}

// defaultRoutes says whether pid's network namespace has an IPv4 and an
// IPv6 default route.
func defaultRoutes(pid int) (have [2]bool, _ error) {
	for i, f := range []struct {
		path string
		def  func([]string) bool
	}{
		{"net/route", func(c []string) bool { return len(c) > 7 && c[1] == "00000000" && c[7] == "00000000" }},
		{"net/ipv6_route", func(c []string) bool {
			return len(c) > 9 && c[0] == strings.Repeat("0", 32) && c[1] == "00" && c[9] != "lo"
		}},
	} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f.path))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return have, fmt.Errorf("routes: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if f.def(strings.Fields(sc.Text())) {
				have[i] = true
			}
		}
	}
	return have, nil
}

// pastaMessage drops pasta's complaints about a missing syslog.
func pastaMessage(s string) string {
	var keep []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "Failed to send") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "; ")
}

// capped keeps the first max bytes written to it.
type capped struct {
	b   *bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.b.Len(); room > 0 {
		c.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}
