package jail

import (
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Step tracing, a debug aid for the start path: with ARBOR_JAIL_TRACE=1 in
// the environment of the process that starts sandboxes, Manager.Start and
// Sandbox.Start stamp each step (CLOCK_MONOTONIC, the same clock in init)
// and init stamps its own; each start then prints one line to stderr
// with every step's offset from the first stamp. Off, a trace is nil and
// costs a nil check.
var traceOn = os.Getenv("ARBOR_JAIL_TRACE") != ""

// tracer collects (step, time) stamps.
type tracer struct {
	mu    sync.Mutex
	steps []string
	ns    []int64
}

func newTracer() *tracer {
	if !traceOn {
		return nil
	}
	return &tracer{}
}

func monoNow() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func (t *tracer) mark(step string) {
	if t == nil {
		return
	}
	now := monoNow()
	t.mu.Lock()
	t.steps = append(t.steps, step)
	t.ns = append(t.ns, now)
	t.mu.Unlock()
}

// merge adds stamps init sent (names and times side by side).
func (t *tracer) merge(steps []string, ns []int64) {
	if t == nil {
		return
	}
	t.mu.Lock()
	for i := range steps {
		if i < len(ns) {
			t.steps = append(t.steps, "init:"+steps[i])
			t.ns = append(t.ns, ns[i])
		}
	}
	t.mu.Unlock()
}

// print writes the stamps in time order, as offsets from the first.
func (t *tracer) print(what string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	idx := make([]int, len(t.ns))
	for i := range idx {
		idx[i] = i
	}
	for i := 1; i < len(idx); i++ { // insertion sort: a handful of stamps
		for j := i; j > 0 && t.ns[idx[j]] < t.ns[idx[j-1]]; j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "jail trace %s:", what)
	for _, i := range idx {
		fmt.Fprintf(&b, " %s=%.3f", t.steps[i], float64(t.ns[i]-t.ns[idx[0]])/1e6)
	}
	fmt.Fprintln(os.Stderr, b.String())
}

// initTrace is init's side: stamps sent back in a message's Trace fields.
type initTrace struct {
	steps []string
	ns    []int64
}

func (t *initTrace) mark(step string) {
	if t == nil {
		return
	}
	t.steps = append(t.steps, step)
	t.ns = append(t.ns, monoNow())
}

func (t *initTrace) into(m *msg) *msg {
	if t != nil {
		m.TraceSteps, m.TraceNS = t.steps, t.ns
		t.steps, t.ns = nil, nil
	}
	return m
}

// takeTrace hands the sandbox's start trace to its first exec.
func (s *Sandbox) takeTrace() *tracer {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tr
	s.tr = nil
	return t
}

// firstWrite marks and prints the trace at w's first write.
func (t *tracer) firstWrite(w interface{ Write([]byte) (int, error) }, name string) writerFunc {
	var once sync.Once
	return func(b []byte) (int, error) {
		if t != nil {
			once.Do(func() { t.mark("first-output"); t.print(name) })
		}
		return w.Write(b)
	}
}
