package jailbackend

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/engine"
	"github.com/arbor-dev/arbor/internal/jail"
	"github.com/arbor-dev/arbor/internal/nodefs"
)

// NodeFiles shows a node as its processes see it: its files at
// /workspace (and at any path under no other prefix), its /tmp at /tmp
// (engine.FileServer).
func (b *backend) NodeFiles(id, filesPath string) (engine.NodeFiles, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if _, ok := b.get(id); !ok {
		return nil, api.Errorf(api.ErrNotFound, "jail backend: files of %s: not held", id)
	}
	tmp, err := b.TmpPath(id)
	if err != nil {
		return nil, err
	}
	return nodefs.New(nodefs.Root{Prefix: "/workspace", Dir: filesPath}, nodefs.Root{Prefix: "/tmp", Dir: tmp})
}

// Limits of background processes.
const (
	// MaxBackground is how many background processes one node runs at once.
	MaxBackground = 64
	// keepEnded is how many ended background processes a node keeps (with
	// their logs) for exec_list and exec_logs.
	keepEnded = 16
	// LogBytes is what a background process's log keeps: its last output.
	LogBytes = 1 << 20
)

// bgProcs are the background processes of every node (Spawn).
type bgProcs struct {
	wg    sync.WaitGroup       // the goroutines that wait for each process
	mu    sync.Mutex           // guards nodes and count
	nodes map[string][]*bgProc // by node id, in start order
	count map[string]int       // background processes started, by node id (p1, p2, ...)
}

// bgProc is one background process and its log.
type bgProc struct {
	info api.Process // ID, Pid, Argv, StartedNS; fixed once started
	p    *jail.Process
	done chan struct{} // closed once exit is set

	mu      sync.Mutex // guards the fields below
	log     []logChunk // its last output, at most LogBytes
	size    int
	next    uint64        // the sequence number of the next chunk
	exit    *api.ExecExit // set once it ended
	changed chan struct{} // closed (and replaced) at each change
}

type logChunk struct {
	seq uint64
	o   api.ExecOutput
}

func (bp *bgProc) write(stream string, b []byte) {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	if len(b) > LogBytes {
		b = b[len(b)-LogBytes:]
	}
	bp.log = append(bp.log, logChunk{bp.next, api.ExecOutput{Stream: stream, Data: slices.Clone(b)}})
	bp.next++
	bp.size += len(b)
	for bp.size > LogBytes {
		bp.size -= len(bp.log[0].o.Data)
		bp.log = bp.log[1:]
	}
	close(bp.changed)
	bp.changed = make(chan struct{})
}

func (bp *bgProc) ended(x api.ExecExit) {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	bp.exit = &x
	close(bp.done)
	close(bp.changed)
	bp.changed = make(chan struct{})
}

// since returns the chunks from seq on, the exit if it ended, and a
// channel closed at the next change.
func (bp *bgProc) since(seq uint64) ([]logChunk, *api.ExecExit, <-chan struct{}) {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	i, _ := slices.BinarySearchFunc(bp.log, seq, func(c logChunk, s uint64) int {
		switch {
		case c.seq < s:
			return -1
		case c.seq > s:
			return 1
		}
		return 0
	})
	return slices.Clone(bp.log[i:]), bp.exit, bp.changed
}

func (bp *bgProc) snapshot() api.Process {
	bp.mu.Lock()
	defer bp.mu.Unlock()
	p := bp.info
	p.Argv = slices.Clone(p.Argv)
	p.Exit = bp.exit
	return p
}

// exitOf is how a jail process ended, as the wire says it.
func exitOf(st jail.ExitStatus, start time.Time) api.ExecExit {
	x := api.ExecExit{ExitCode: st.Code, DurationNS: max(time.Since(start).Nanoseconds(), 1)}
	if st.Signal != 0 {
		x.ExitCode, x.Signal = -1, strings.TrimPrefix(unix.SignalName(st.Signal), "SIG")
	}
	return x
}

// Spawn starts cmd in the background (engine.Processes).
func (b *backend) Spawn(ctx context.Context, id string, cmd engine.Command) (api.Process, error) {
	sb, err := b.live("spawn on", id, cmd)
	if err != nil {
		return api.Process{}, err
	}
	b.bg.mu.Lock()
	running := 0
	for _, bp := range b.bg.nodes[id] {
		if bp.snapshot().Exit == nil {
			running++
		}
	}
	b.bg.mu.Unlock()
	if running >= MaxBackground {
		return api.Process{}, api.Errorf(api.ErrLimit, "jail backend: spawn on %s: %d background processes run already", id, running)
	}
	bp := &bgProc{changed: make(chan struct{}), done: make(chan struct{})}
	start := time.Now()
	p, err := sb.Start(execSpec(cmd,
		writer(func(d []byte) (int, error) { bp.write("stdout", d); return len(d), nil }),
		writer(func(d []byte) (int, error) { bp.write("stderr", d); return len(d), nil })))
	if err != nil {
		return api.Process{}, fmt.Errorf("jail backend: spawn on %s: %w", id, err)
	}
	bp.p = p
	b.bg.mu.Lock()
	if b.bg.nodes == nil {
		b.bg.nodes, b.bg.count = map[string][]*bgProc{}, map[string]int{}
	}
	b.bg.count[id]++
	bp.info = api.Process{ID: "p" + strconv.Itoa(b.bg.count[id]), Pid: p.Pid(), Argv: slices.Clone(cmd.Argv), StartedNS: start.UnixNano()}
	list := append(b.bg.nodes[id], bp)
	// Forget the oldest ended ones past keepEnded.
	ended := 0
	for i := len(list) - 1; i >= 0; i-- {
		if list[i].snapshot().Exit != nil {
			if ended++; ended > keepEnded {
				list = slices.Delete(list, i, i+1)
			}
		}
	}
	b.bg.nodes[id] = list
	b.bg.mu.Unlock()
	b.bg.wg.Go(func() {
		st, _ := p.Wait(context.Background()) // it ends with the sandbox at the latest
		bp.ended(exitOf(st, start))
	})
	return bp.snapshot(), nil
}

// execSpec is how the sandbox runs cmd, its output to stdout and stderr.
func execSpec(cmd engine.Command, stdout, stderr io.Writer) jail.ExecSpec {
	return jail.ExecSpec{Argv: cmd.Argv, Env: environ(cmd.Env), Cwd: filepath.Join("/workspace", cmd.Cwd), Timeout: cmd.Timeout,
		Stdin: cmd.Stdin, Stdout: stdout, Stderr: stderr, TTY: cmd.TTY, Rows: cmd.Rows, Cols: cmd.Cols}
}

// live checks that node id is live and cmd runnable there, and returns its sandbox.
func (b *backend) live(verb, id string, cmd engine.Command) (*jail.Sandbox, error) {
	sb, ok := b.get(id)
	switch {
	case !ok:
		return nil, api.Errorf(api.ErrNotFound, "jail backend: %s %s: not held", verb, id)
	case sb == nil:
		return nil, api.Errorf(api.ErrState, "jail backend: %s %s: suspended", verb, id)
	case len(cmd.Argv) == 0:
		return nil, api.Errorf(api.ErrBadRequest, "jail backend: %s %s: no command", verb, id)
	case cmd.Cwd != "" && !filepath.IsLocal(cmd.Cwd):
		return nil, api.Errorf(api.ErrBadRequest, "jail backend: %s %s: cwd %q is not a path inside the node", verb, id, cmd.Cwd)
	}
	return sb, nil
}

func (b *backend) proc(id, pid string) (*bgProc, error) {
	b.bg.mu.Lock()
	defer b.bg.mu.Unlock()
	for _, bp := range b.bg.nodes[id] {
		if bp.info.ID == pid {
			return bp, nil
		}
	}
	return nil, api.Errorf(api.ErrNotFound, "jail backend: node %s has no background process %q", id, pid)
}

// ProcessList lists node id's background processes (engine.Processes).
func (b *backend) ProcessList(ctx context.Context, id string) ([]api.Process, error) {
	if _, ok := b.get(id); !ok {
		return nil, api.Errorf(api.ErrNotFound, "jail backend: processes of %s: not held", id)
	}
	b.bg.mu.Lock()
	list := slices.Clone(b.bg.nodes[id])
	b.bg.mu.Unlock()
	out := make([]api.Process, 0, len(list))
	for _, bp := range list {
		out = append(out, bp.snapshot())
	}
	return out, nil
}

// Kill kills background process pid of node id and all it started.
func (b *backend) Kill(ctx context.Context, id, pid string) error {
	bp, err := b.proc(id, pid)
	if err != nil {
		return err
	}
	if bp.snapshot().Exit != nil {
		return nil
	}
	if err := bp.p.Kill(); err != nil {
		return fmt.Errorf("jail backend: kill %s of %s: %w", pid, id, err)
	}
	select {
	case <-bp.done: // ended, and listed so
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Logs sends background process pid's log (engine.Processes).
func (b *backend) Logs(ctx context.Context, id, pid string, follow bool, out func(api.ExecOutput) error) (*api.ExecExit, error) {
	bp, err := b.proc(id, pid)
	if err != nil {
		return nil, err
	}
	var seq uint64
	for {
		chunks, x, changed := bp.since(seq)
		for _, c := range chunks {
			if err := out(c.o); err != nil {
				return nil, err
			}
			seq = c.seq + 1
		}
		if x != nil || !follow {
			return x, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// dropProcs forgets node id's background processes (it stopped).
func (b *backend) dropProcs(id string) {
	b.bg.mu.Lock()
	defer b.bg.mu.Unlock()
	delete(b.bg.nodes, id)
	delete(b.bg.count, id)
}

// resizer applies the sizes of sizes to p's pty until done is closed.
func resizer(p *jail.Process, sizes <-chan engine.WindowSize, done <-chan struct{}) {
	for {
		select {
		case <-done:
			return
		case ws, ok := <-sizes:
			if !ok {
				return
			}
			p.Resize(ws.Rows, ws.Cols) // a pty gone meanwhile: nothing to resize
		}
	}
}
