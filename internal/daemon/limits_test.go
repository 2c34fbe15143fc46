package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/client"
	"github.com/arbor-dev/arbor/internal/lineapi"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// TestFloodIdleConnections is issue 16's descriptor exhaustion: a daemon
// with a low RLIMIT_NOFILE (512) and a short idle timeout, flooded with
// more idle connections than it has descriptors. The mounts keep working during the
// flood (files written and read through one, several held open at once),
// every connection past the cap and a new client get a clear "limit"
// refusal, and once the idle timeout closes the flood's connections (each
// told why) the slots come back.
func TestFloodIdleConnections(t *testing.T) {
	testenv.NeedFUSE(t)
	const nofile, idle = 512, 4 * time.Second
	lim := lineapi.DefaultLimits(nofile, 0)
	dir := tempDir(t)
	home, base, mp := filepath.Join(dir, "home"), filepath.Join(dir, "base"), filepath.Join(dir, "mnt")
	for _, d := range []string{home, base} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(base, "seed.txt"), "seed")
	p := spawn(t, home, dir, fmt.Sprintf("%s=%d", daemonNoFileEnv, nofile), daemonIdleEnv+"="+idle.String())
	pid := p.cmd.Process.Pid
	sock := filepath.Join(home, "arbord.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl := client.New(sock)
	if _, err := cl.Do(ctx, api.Request{Op: api.OpWsMount, Base: base, Mountpoint: mp}); err != nil {
		t.Fatal(err)
	}
	cl.Close() // its idle connection would hold a slot
	t.Logf("daemon pid %d: RLIMIT_NOFILE %d, cap %d connections (reserve %d), %d fds open, RSS %s before the flood",
		pid, nofile, lim.MaxConns, lim.Reserve, openFDs(t, pid), rss(pid))

	// The flood: more idle connections than the daemon has descriptors.
	const flood = nofile + 100
	extra := flood - lim.MaxConns
	type answer struct {
		resp api.Response
		err  error
		at   time.Duration
	}
	var (
		mu      sync.Mutex
		answers []answer
		wg      sync.WaitGroup
		conns   []net.Conn
	)
	start := time.Now()
	for range flood {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatalf("dial %d: %v", len(conns), err)
		}
		conns = append(conns, c)
		wg.Go(func() {
			c.SetReadDeadline(time.Now().Add(idle + 20*time.Second))
			b, err := bufio.NewReader(c).ReadBytes('\n')
			a := answer{err: err, at: time.Since(start)}
			if err == nil {
				a.err = json.Unmarshal(b, &a.resp)
			}
			mu.Lock()
			answers = append(answers, a)
			mu.Unlock()
		})
	}
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	count := func(what string) (n int) {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range answers {
			if a.err == nil && a.resp.Code == api.CodeLimit && strings.Contains(a.resp.Message, what) {
				n++
			}
		}
		return n
	}
	summary := func() string {
		mu.Lock()
		defer mu.Unlock()
		n := map[string]int{}
		for _, a := range answers {
			k := a.resp.Code + " " + a.resp.Message
			if a.err != nil {
				k = a.err.Error()
			}
			n[k[:min(len(k), 60)]]++
		}
		return fmt.Sprint(n)
	}
	for deadline := time.Now().Add(idle / 2); count("too many connections") < extra && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("during the flood: %d fds open in the daemon, RSS %s", openFDs(t, pid), rss(pid))
	// The mount keeps working: files held open, written and read.
	var open []*os.File
	for i := range 8 {
		f, err := os.Create(filepath.Join(mp, fmt.Sprintf("held%d", i)))
		if err != nil {
			t.Fatalf("create in the mount during the flood: %v", err)
		}
		open = append(open, f)
	}
	for i := range 40 {
		name := filepath.Join(mp, fmt.Sprintf("f%d", i))
		if err := os.WriteFile(name, []byte(name), 0o644); err != nil {
			t.Fatalf("write in the mount during the flood: %v", err)
		}
		if b, err := os.ReadFile(name); err != nil || string(b) != name {
			t.Fatalf("read in the mount during the flood: %q, %v", b, err)
		}
	}
	for _, f := range open {
		if _, err := f.WriteString("held"); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(mp, "seed.txt")); err != nil || string(b) != "seed" {
		t.Fatalf("read the base through the mount during the flood: %q, %v", b, err)
	}
	// Every connection past the cap was refused, and a new client is.
	if n := count("too many connections"); n != extra {
		t.Fatalf("%d of %d connections past the cap of %d refused (answers: %s)", n, extra, lim.MaxConns, summary())
	}
	cl2 := client.New(sock)
	defer cl2.Close()
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	_, err := cl2.Ping(pctx)
	pcancel()
	if !errors.Is(err, api.ErrLimit) || !strings.Contains(err.Error(), "too many connections") {
		t.Fatalf("ping during the flood: %v, want a limit refusal", err)
	}
	if elapsed := time.Since(start); elapsed >= idle {
		t.Fatalf("the checks during the flood took %v, past the idle timeout %v: make it longer", elapsed, idle)
	}

	// The idle timeout closes the flood's connections, each with a line
	// saying why, and the slots come back.
	wg.Wait()
	if n := count("idle timeout"); n != lim.MaxConns {
		t.Fatalf("%d connections closed for idling, want the %d admitted: %s", n, lim.MaxConns, summary())
	}
	for _, a := range answers {
		if strings.Contains(a.resp.Message, "idle timeout") && a.at < idle {
			t.Fatalf("a connection was closed for idling after %v, before the idle timeout %v", a.at, idle)
		}
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := cl2.Ping(pctx)
		pcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ping after the idle timeout: %v", err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(mp, "held3")); err != nil || string(b) != "held" {
		t.Fatalf("read in the mount after the flood: %q, %v", b, err)
	}
	time.Sleep(1500 * time.Millisecond) // the scavenge after a flood
	t.Logf("after the flood: %d fds open in the daemon, RSS %s", openFDs(t, pid), rss(pid))
}

// openFDs counts the descriptors process pid has open.
func openFDs(t *testing.T, pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// rss is process pid's resident set size, as /proc/PID/status says it.
func rss(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return err.Error()
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "?"
}
