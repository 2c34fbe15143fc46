package jail_test

import (
	"bufio"
	"context"
	"fmt"
	"github.com/arbor-dev/arbor/internal/sandboxbench"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/jail"
	"github.com/arbor-dev/arbor/internal/testenv"
)

// Benchmarks, side by side with what one would use otherwise on this
// machine: bubblewrap with the same namespaces and binds, and plain
// unshare. Run:
//
//	go test -run '^$' -bench . -benchtime 50x ./internal/jail/
//
// Each reports its median as p50-ms (ns/op is the mean).

// firstByte is where a timed command's first output arrives.
type firstByte struct {
	r *os.File
	w *os.File
}

func newFirstByte(b *testing.B) *firstByte {
	r, w, err := os.Pipe()
	if err != nil {
		b.Fatal(err)
	}
	return &firstByte{r, w}
}

func (f *firstByte) wait(b *testing.B) {
	var one [1]byte
	if _, err := f.r.Read(one[:]); err != nil {
		b.Fatal(err)
	}
}

type samples []time.Duration

func (s samples) report(b *testing.B) {
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) > 0 {
		b.ReportMetric(float64(s[len(s)/2])/1e6, "p50-ms")
	}
}

// BenchmarkFirstByte: from nothing to the first byte of `echo hi`'s
// output (for jail: Start, then Exec; Stop is outside the timing).
func BenchmarkFirstByte(b *testing.B) {
	// warm: a spare init is ready (Config.Spares, the default), as it is
	// again a few ms after each sandbox's first process ends (or 20 ms
	// after its Start); cold: none (Spares -1).
	for _, v := range []struct {
		name   string
		spares int
	}{{"jail-warm", 0}, {"jail-cold", -1}} {
		b.Run(v.name, func(b *testing.B) {
			m := newManagerSpares(b, v.spares)
			ws, tmp := b.TempDir(), b.TempDir()
			var s samples
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				if err := m.Warm(context.Background()); err != nil {
					b.Fatal(err)
				}
				fb := newFirstByte(b)
				b.StartTimer()
				t0 := time.Now()
				sb, err := m.Start(context.Background(), jail.Spec{Name: "fb" + strconv.Itoa(i), Workspace: ws, Tmp: tmp})
				if err != nil {
					b.Fatal(err)
				}
				p, err := sb.Start(jail.ExecSpec{Argv: []string{"echo", "hi"}, Stdout: fb.w})
				if err != nil {
					b.Fatal(err)
				}
				fb.wait(b)
				s = append(s, time.Since(t0))
				b.StopTimer()
				p.Wait(context.Background())
				sb.Stop(context.Background())
				fb.r.Close()
				fb.w.Close()
				b.StartTimer()
			}
			s.report(b)
		})
	}
	tools := []struct {
		name, prog string
		args       func(ws, tmp string) []string
	}{
		{"bwrap", "bwrap", func(ws, tmp string) []string { return sandboxbench.BwrapArgs(ws, tmp, "echo", "hi") }},
		{"unshare", "unshare", func(ws, tmp string) []string { return sandboxbench.UnshareArgs("echo", "hi") }},
	}
	for _, tool := range tools {
		b.Run(tool.name, func(b *testing.B) {
			testenv.NeedRoot(b, "namespaces")
			testenv.NeedCommand(b, tool.prog, tool.prog)
			ws, tmp := b.TempDir(), b.TempDir()
			var s samples
			for i := 0; i < b.N; i++ {
				fb := newFirstByte(b)
				cmd := exec.Command(tool.prog, tool.args(ws, tmp)...)
				cmd.Stdout = fb.w
				t0 := time.Now()
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				fb.wait(b)
				s = append(s, time.Since(t0))
				b.StopTimer()
				if err := cmd.Wait(); err != nil {
					b.Fatal(err)
				}
				fb.r.Close()
				fb.w.Close()
				b.StartTimer()
			}
			s.report(b)
		})
	}
}

// BenchmarkExec: one exec round trip of /bin/true in a running sandbox,
// next to a plain fork+exec of it on the host.
func BenchmarkExec(b *testing.B) {
	b.Run("jail", func(b *testing.B) {
		m := newManager(b)
		sb, _, _ := start(b, m, "rt")
		var s samples
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			st, err := sb.Exec(context.Background(), jail.ExecSpec{Argv: []string{"/bin/true"}})
			if err != nil || st.Code != 0 {
				b.Fatal(st, err)
			}
			s = append(s, time.Since(t0))
		}
		s.report(b)
	})
	b.Run("host", func(b *testing.B) {
		var s samples
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
			s = append(s, time.Since(t0))
		}
		s.report(b)
	})
}

// hundred starts 100 sleeping processes and says ready.
const hundred = `for i in $(seq 99); do sleep 1000 & done; echo ready; wait`

// BenchmarkStop100: killing a sandbox of 100 processes until they are
// all gone (for the tools: SIGKILL of the namespace's init until the
// tool, which waits for the namespace to empty, has exited).
func BenchmarkStop100(b *testing.B) {
	b.Run("jail", func(b *testing.B) {
		m := newManager(b)
		ws, tmp := b.TempDir(), b.TempDir()
		var s samples
		b.StopTimer()
		for i := 0; i < b.N; i++ {
			sb, err := m.Start(context.Background(), jail.Spec{Name: "k" + strconv.Itoa(i), Workspace: ws, Tmp: tmp})
			if err != nil {
				b.Fatal(err)
			}
			fb := newFirstByte(b)
			if _, err := sb.Start(jail.ExecSpec{Argv: []string{"sh", "-c", hundred}, Stdout: fb.w}); err != nil {
				b.Fatal(err)
			}
			fb.wait(b)
			if n, _ := sb.PidCount(); n < 100 {
				b.Fatalf("%d processes", n)
			}
			b.StartTimer()
			t0 := time.Now()
			if err := sb.Stop(context.Background()); err != nil {
				b.Fatal(err)
			}
			s = append(s, time.Since(t0))
			b.StopTimer()
			fb.r.Close()
			fb.w.Close()
		}
		s.report(b)
	})
	for _, tool := range []string{"bwrap", "unshare"} {
		b.Run(tool, func(b *testing.B) {
			testenv.NeedRoot(b, "namespaces")
			testenv.NeedCommand(b, tool, tool)
			ws, tmp := b.TempDir(), b.TempDir()
			var s samples
			b.StopTimer()
			for i := 0; i < b.N; i++ {
				args := sandboxbench.UnshareArgs("sh", "-c", hundred)
				if tool == "bwrap" {
					args = sandboxbench.BwrapArgs(ws, tmp, "sh", "-c", hundred)
				}
				cmd := exec.Command(tool, args...)
				out, _ := cmd.StdoutPipe()
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				bufio.NewReader(out).ReadString('\n')
				init := nsInit(b, cmd.Process.Pid)
				b.StartTimer()
				t0 := time.Now()
				syscall.Kill(init, syscall.SIGKILL)
				cmd.Wait()
				s = append(s, time.Since(t0))
				b.StopTimer()
			}
			s.report(b)
		})
	}
}

// nsInit finds the PID-namespace init a tool forked (its only child).
func nsInit(b *testing.B, tool int) int {
	for i := 0; i < 100; i++ {
		c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", tool, tool))
		if f := strings.Fields(string(c)); len(f) > 0 {
			pid, _ := strconv.Atoi(f[0])
			return pid
		}
		time.Sleep(time.Millisecond)
	}
	b.Fatalf("no child of %d", tool)
	return 0
}

// BenchmarkStop32: 32 sandboxes each running a shell loop, all stopped
// in parallel; the time is the whole batch's.
func BenchmarkStop32(b *testing.B) {
	m := newManager(b)
	ws, tmp := b.TempDir(), b.TempDir()
	var s samples
	b.StopTimer()
	for i := 0; i < b.N; i++ {
		var sbs []*jail.Sandbox
		for j := 0; j < 32; j++ {
			sb, err := m.Start(context.Background(), jail.Spec{Name: fmt.Sprintf("l%d-%d", i, j), Workspace: ws, Tmp: tmp})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := sb.Start(jail.ExecSpec{Argv: []string{"sh", "-c", "while :; do sleep 0.05; done"}}); err != nil {
				b.Fatal(err)
			}
			sbs = append(sbs, sb)
		}
		b.StartTimer()
		t0 := time.Now()
		var wg sync.WaitGroup
		for _, sb := range sbs {
			wg.Go(func() {
				if err := sb.Stop(context.Background()); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		s = append(s, time.Since(t0))
		b.StopTimer()
	}
	s.report(b)
}

// BenchmarkIdleMemory: what an idle sandbox adds to the host, as the RSS
// and PSS of its processes (jail: its init; the tools: themselves and
// their namespace's init running `sleep`), averaged over 8.
func BenchmarkIdleMemory(b *testing.B) {
	const n = 8
	measure := func(b *testing.B, pids []int) {
		var rss, pss int64
		for _, pid := range pids {
			r, p := smapsRollup(b, pid)
			rss += r
			pss += p
		}
		b.ReportMetric(float64(rss)/n/1024, "RSS-KiB/sandbox")
		b.ReportMetric(float64(pss)/n/1024, "PSS-KiB/sandbox")
	}
	b.Run("jail", func(b *testing.B) {
		m := newManager(b)
		for i := 0; i < b.N; i++ {
			var pids []int
			var mem int64
			for j := 0; j < n; j++ {
				sb, _, _ := start(b, m, fmt.Sprintf("idle%d-%d", i, j))
				pids = append(pids, sb.InitPid())
				got, _ := sb.MemoryBytes()
				mem += got
			}
			time.Sleep(100 * time.Millisecond)
			measure(b, pids)
			b.ReportMetric(float64(mem)/n/1024, "cgroup-KiB/sandbox")
			for _, name := range m.Sandboxes() {
				sb, _ := m.Get(name)
				sb.Stop(context.Background())
			}
		}
	})
	for _, tool := range []string{"bwrap", "unshare"} {
		b.Run(tool, func(b *testing.B) {
			testenv.NeedRoot(b, "namespaces")
			testenv.NeedCommand(b, tool, tool)
			ws, tmp := b.TempDir(), b.TempDir()
			for i := 0; i < b.N; i++ {
				var pids []int
				var cmds []*exec.Cmd
				for j := 0; j < n; j++ {
					args := sandboxbench.UnshareArgs("sleep", "1000")
					if tool == "bwrap" {
						args = sandboxbench.BwrapArgs(ws, tmp, "sleep", "1000")
					}
					cmd := exec.Command(tool, args...)
					if err := cmd.Start(); err != nil {
						b.Fatal(err)
					}
					cmds = append(cmds, cmd)
				}
				time.Sleep(200 * time.Millisecond)
				for _, c := range cmds {
					pids = append(pids, descendants(c.Process.Pid)...)
				}
				measure(b, pids)
				for _, c := range cmds {
					c.Process.Kill()
					c.Wait()
				}
			}
		})
	}
}

func descendants(pid int) []int {
	out := []int{pid}
	c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(c)) {
		child, _ := strconv.Atoi(f)
		out = append(out, descendants(child)...)
	}
	return out
}

// smapsRollup returns a process's RSS and PSS in bytes.
func smapsRollup(b *testing.B, pid int) (rss, pss int64) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(io.Reader(f))
	for sc.Scan() {
		fl := strings.Fields(sc.Text())
		if len(fl) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fl[1], 10, 64)
		switch fl[0] {
		case "Rss:":
			rss = v << 10
		case "Pss:":
			pss = v << 10
		}
	}
	return rss, pss
}
