package vm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/arbor-dev/arbor/internal/vm/wire"
)

// ErrAgent is an agent that broke the protocol (a malformed frame, a
// flood) or stopped answering: its connection is closed, and every call
// on it fails with this error.
var ErrAgent = errors.New("guest agent failed")

// maxUnsolicited bounds the frames a guest may send that answer nothing
// asked (no call waits for their id) before the connection counts as
// flooded. Output of a call that just ended is some; a guest that sends
// thousands is broken.
const maxUnsolicited = 4096

// agentConn is the host's end of one session with a guest's agent.
type agentConn struct {
	c    net.Conn
	r    *wire.Reader
	wmu  sync.Mutex
	mu   sync.Mutex
	next uint64
	// calls waiting for replies, by id
	calls map[uint64]chan *wire.Msg
	files *fileServer   // the node's files, served to the guest; nil: none
	fsSem chan struct{} // bounds the file calls served at once
	fsWG  sync.WaitGroup
	err   error         // why the connection broke
	dead  chan struct{} // closed when it broke
	done  chan struct{} // closed when the reader ended
}

// dialAgent connects to the agent's socket and starts a session: it sends
// hellos (again every 250 ms: the first may land in the rest of an old
// stream) until the guest's ready answers, or ctx ends.
func dialAgent(ctx context.Context, path, hostname, files string) (*agentConn, error) {
	var fsrv *fileServer
	if files != "" {
		var err error
		if fsrv, err = newFileServer(files); err != nil {
			return nil, fmt.Errorf("%w: the node's files: %w", ErrAgent, err)
		}
	}
	a, err := dialSession(ctx, path, hostname)
	if err != nil {
		if fsrv != nil {
			fsrv.close()
		}
		return nil, err
	}
	a.files = fsrv
	go a.read(a.r)
	return a, nil
}

func dialSession(ctx context.Context, path, hostname string) (*agentConn, error) {
	var c net.Conn
	var err error
	for {
		var d net.Dialer
		if c, err = d.DialContext(ctx, "unix", path); err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: connect %s: %w", ErrAgent, path, err)
		case <-time.After(2 * time.Millisecond):
		}
	}
	var sid [8]byte
	rand.Read(sid[:])
	seed := make([]byte, 64)
	rand.Read(seed)
	hello := &wire.Msg{Op: wire.OpHello, Session: hex.EncodeToString(sid[:]), Hostname: hostname, Seed: seed}
	f, _ := wire.Encode(hello)
	r := wire.NewReader(c)
	got := make(chan error, 1)
	go func() {
		_, err := r.Scan(64<<20, func(m *wire.Msg) bool { return m.Op == wire.OpReady && m.Session == hello.Session })
		got <- err
	}()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		// The guest may not read yet (its port unopened): the write must
		// not outlive ctx.
		dl := time.Now().Add(time.Second)
		if d, ok := ctx.Deadline(); ok && d.Before(dl) {
			dl = d
		}
		c.SetWriteDeadline(dl)
		if _, err := c.Write(f); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			c.Close()
			<-got
			return nil, fmt.Errorf("%w: hello: %w", ErrAgent, err)
		}
		select {
		case err := <-got:
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("%w: hello: %w", ErrAgent, err)
			}
			return &agentConn{c: c, r: r, calls: map[uint64]chan *wire.Msg{}, fsSem: make(chan struct{}, 32),
				dead: make(chan struct{}), done: make(chan struct{})}, nil
		case <-ctx.Done():
			c.Close()
			<-got
			return nil, fmt.Errorf("%w: no answer to hello: %w", ErrAgent, ctx.Err())
		case <-tick.C:
		}
		c.SetWriteDeadline(time.Time{})
	}
}

func (a *agentConn) read(r *wire.Reader) {
	defer close(a.done)
	defer a.fsWG.Wait()
	unsolicited := 0
	for {
		m, err := r.Read()
		if err != nil {
			a.fail(err)
			return
		}
		if m.Op == wire.OpFS {
			a.serveFile(m)
			continue
		}
		a.mu.Lock()
		ch := a.calls[m.ID]
		a.mu.Unlock()
		if ch == nil || m.ID == 0 {
			if unsolicited++; unsolicited > maxUnsolicited {
				a.fail(fmt.Errorf("flooded: %d frames that answer nothing asked", unsolicited))
				return
			}
			continue
		}
		select {
		case ch <- m:
		case <-a.dead:
			return
		}
	}
}

// serveFile answers a guest's file call, concurrently with others up to
// fsSem's bound (then inline: a guest that floods waits for its answers).
func (a *agentConn) serveFile(m *wire.Msg) {
	serve := func() {
		r := &wire.Msg{Op: wire.OpFSR, ID: m.ID, Errno: int(syscall.ENODEV)}
		if a.files != nil {
			r = a.files.serve(m)
		}
		a.send(r)
	}
	select {
	case a.fsSem <- struct{}{}:
		a.fsWG.Add(1)
		go func() {
			defer a.fsWG.Done()
			defer func() { <-a.fsSem }()
			serve()
		}()
	default:
		serve()
	}
}

// fail breaks the connection with err (the first one counts).
func (a *agentConn) fail(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return
	}
	a.err = fmt.Errorf("%w: %w", ErrAgent, err)
	close(a.dead)
	a.c.Close()
}

// Err is why the connection broke, or nil.
func (a *agentConn) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

func (a *agentConn) close() {
	a.fail(errors.New("closed"))
	<-a.done
	if a.files != nil {
		a.files.close()
	}
}

// call registers a new id; the channel gets its replies.
func (a *agentConn) call() (uint64, chan *wire.Msg, func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.next++
	id := a.next
	ch := make(chan *wire.Msg, 16)
	a.calls[id] = ch
	return id, ch, func() {
		a.mu.Lock()
		delete(a.calls, id)
		a.mu.Unlock()
	}
}

func (a *agentConn) send(m *wire.Msg) error {
	f, err := wire.Encode(m)
	if err != nil {
		return err
	}
	a.wmu.Lock()
	defer a.wmu.Unlock()
	if err := a.Err(); err != nil {
		return err
	}
	a.c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := a.c.Write(f); err != nil {
		a.fail(fmt.Errorf("write: %w", err))
		return a.Err()
	}
	return nil
}

// wait returns the next reply on ch.
func (a *agentConn) wait(ctx context.Context, ch chan *wire.Msg) (*wire.Msg, error) {
	select {
	case m := <-ch:
		return m, nil
	case <-a.dead:
		return nil, a.Err()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// request sends m and waits for its one reply.
func (a *agentConn) request(ctx context.Context, m *wire.Msg) (*wire.Msg, error) {
	id, ch, done := a.call()
	defer done()
	m.ID = id
	if err := a.send(m); err != nil {
		return nil, err
	}
	return a.wait(ctx, ch)
}

// Ping asks for a pong.
func (a *agentConn) Ping(ctx context.Context) error {
	_, err := a.request(ctx, &wire.Msg{Op: wire.OpPing})
	return err
}

// Exit is how a command ended.
type Exit struct {
	Code   int
	Signal string // "KILL" after a timeout
}

// Cmd is what Exec runs in the guest.
type Cmd struct {
	Argv    []string
	Env     []string
	Cwd     string // in the guest; "" is /
	Timeout time.Duration
	Stdin   io.Reader
}

// Exec runs cmd; out gets its output as it comes (stream "stdout" or
// "stderr"), from one goroutine at a time. An error from out, or ctx's
// end, kills the command.
func (a *agentConn) Exec(ctx context.Context, cmd Cmd, out func(stream string, data []byte) error) (Exit, error) {
	id, ch, done := a.call()
	defer done()
	m := &wire.Msg{Op: wire.OpExec, ID: id, Argv: cmd.Argv, Env: cmd.Env, Cwd: cmd.Cwd, TimeoutMS: cmd.Timeout.Milliseconds()}
	if err := a.send(m); err != nil {
		return Exit{}, err
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	defer func() { close(stop); wg.Wait() }()
	if cmd.Stdin != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, wire.ChunkSize)
			for {
				n, err := cmd.Stdin.Read(buf)
				if n > 0 && a.send(&wire.Msg{Op: wire.OpStdin, ID: id, Data: buf[:n]}) != nil {
					return
				}
				select {
				case <-stop:
					return
				default:
				}
				if err != nil {
					a.send(&wire.Msg{Op: wire.OpStdin, ID: id, EOF: true})
					return
				}
			}
		}()
	} else {
		a.send(&wire.Msg{Op: wire.OpStdin, ID: id, EOF: true})
	}
	kill := func() { a.send(&wire.Msg{Op: wire.OpKill, ID: id}) }
	for {
		r, err := a.wait(ctx, ch)
		if err != nil {
			if ctx.Err() != nil {
				kill()
			}
			return Exit{}, err
		}
		switch r.Op {
		case wire.OpOut:
			if err := out(r.Stream, r.Data); err != nil {
				kill()
				return Exit{}, err
			}
		case wire.OpExit:
			if r.Err != "" && r.Code == 0 {
				return Exit{}, errors.New(r.Err)
			}
			if r.Err != "" {
				out("stderr", []byte(r.Err+"\n"))
			}
			return Exit{Code: r.Code, Signal: r.Signal}, nil
		}
	}
}

// ReadFile returns the guest's file at path.
func (a *agentConn) ReadFile(ctx context.Context, path string) ([]byte, error) {
	r, err := a.request(ctx, &wire.Msg{Op: wire.OpRead, Path: path})
	if err != nil {
		return nil, err
	}
	if r.Err != "" {
		return nil, errors.New(r.Err)
	}
	return r.Data, nil
}

// WriteFile writes the guest's file at path.
func (a *agentConn) WriteFile(ctx context.Context, path string, data []byte, mode uint32) error {
	if len(data) > wire.MaxFile {
		return fmt.Errorf("%s: %d bytes is over %d", path, len(data), wire.MaxFile)
	}
	r, err := a.request(ctx, &wire.Msg{Op: wire.OpWrite, Path: path, Data: data, Mode: mode})
	if err != nil {
		return err
	}
	if r.Err != "" {
		return errors.New(r.Err)
	}
	return nil
}
