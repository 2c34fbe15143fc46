package vm

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/vm/wire"
)

// badGuest is a test double of a guest's agent on a unix socket: it
// answers the hello properly, then does what misbehave does.
func badGuest(t *testing.T, misbehave func(c net.Conn)) *agentConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { l.Close(); <-done })
	go func() {
		defer close(done)
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := wire.NewReader(c)
		m, err := r.Read()
		if err != nil || m.Op != wire.OpHello {
			return
		}
		f, _ := wire.Encode(&wire.Msg{Op: wire.OpReady, Session: m.Session})
		c.Write(f)
		misbehave(c)
		// Then hold the connection until the host closes it.
		for {
			if _, err := r.Read(); err != nil {
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	a, err := dialAgent(ctx, path, "bad", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.close)
	return a
}

// TestAgentMalformed: a guest that breaks the framing, floods the channel
// or stops answering gets a clear error, promptly, never a hang.
func TestAgentMalformed(t *testing.T) {
	for _, tc := range []struct {
		name      string
		misbehave func(c net.Conn)
		want      string
	}{
		{"BadMagic", func(c net.Conn) { c.Write([]byte("GARBAGE!GARBAGE!")) }, "bad magic"},
		{"Oversized", func(c net.Conn) {
			h := []byte(wire.Magic + "\x00\x00\x00\x00")
			binary.BigEndian.PutUint32(h[4:], wire.MaxFrame+1)
			c.Write(h)
		}, "over"},
		{"NotJSON", func(c net.Conn) {
			h := []byte(wire.Magic + "\x00\x00\x00\x05{{{{{")
			binary.BigEndian.PutUint32(h[4:8], 5)
			c.Write(h)
		}, "malformed"},
		{"Flood", func(c net.Conn) {
			f, _ := wire.Encode(&wire.Msg{Op: wire.OpPong, ID: 1 << 40})
			for i := 0; i < maxUnsolicited+10; i++ {
				if _, err := c.Write(f); err != nil {
					return
				}
			}
		}, "flooded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := badGuest(t, tc.misbehave)
			start := time.Now()
			err := a.Ping(t.Context())
			if !errors.Is(err, ErrAgent) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ping: %v, want ErrAgent saying %q", err, tc.want)
			}
			if time.Since(start) > 5*time.Second {
				t.Fatalf("the error took %v", time.Since(start))
			}
			// Every later call fails the same way at once.
			if _, err := a.Exec(t.Context(), Cmd{Argv: []string{"true"}}, func(string, []byte) error { return nil }); !errors.Is(err, ErrAgent) {
				t.Fatalf("exec after: %v", err)
			}
		})
	}
	t.Run("Silent", func(t *testing.T) {
		a := badGuest(t, func(net.Conn) {})
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		if err := a.Ping(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("ping of a silent guest: %v, want the deadline", err)
		}
	})
}
