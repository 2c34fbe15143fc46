package lineapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/arbor-dev/arbor/api"
	"github.com/arbor-dev/arbor/internal/metrics"
)

// DefaultIdleTimeout is how long a connection with no request in flight
// and no watch stays open.
const DefaultIdleTimeout = 2 * time.Minute

// maxDefaultConns bounds the default connection cap whatever the fd limit:
// each open connection costs a goroutine and a read buffer (about 16 KiB).
const maxDefaultConns = 4096

// minReserve is the least number of descriptors the default cap leaves to
// the rest of the daemon: /dev/fuse and the files the FUSE servers open,
// the stores' databases and layer directories, exec pipes.
const minReserve = 256

// floodConns is the number of open connections from which the server, once
// they have closed again, hands the memory they used back to the OS.
const floodConns = 256

// Limits are the connection limits a Server enforces.
type Limits struct {
	MaxConns       int           // connections served at once
	MaxConnsPerUID int           // connections of one peer uid
	IdleTimeout    time.Duration // <0: never
	// Reserve is how many descriptors of the process's limit the cap
	// leaves to everything else (informational: what the defaults left).
	Reserve int
}

// DefaultLimits derives the limits from the descriptor limit nofile
// (RLIMIT_NOFILE): a reserve of a quarter of it, at least minReserve, is
// left to the FUSE servers and the stores, and the rest (at most
// maxDefaultConns) is the connection cap. With allowed other uids (an
// allow-list of n of them) one uid may hold at most cap/(n+1), so even all
// of them flooding together leave a share for root and the daemon's owner.
func DefaultLimits(nofile uint64, allowed int) Limits {
	reserve := max(uint64(minReserve), nofile/4)
	var conns uint64
	if nofile > 2*reserve {
		conns = nofile - reserve
	} else {
		conns = nofile / 2
	}
	conns = max(min(conns, maxDefaultConns), 1)
	l := Limits{MaxConns: int(conns), MaxConnsPerUID: int(conns), IdleTimeout: DefaultIdleTimeout, Reserve: int(nofile - min(nofile, conns))}
	if allowed > 0 {
		l.MaxConnsPerUID = max(l.MaxConns/(allowed+1), 1)
	}
	return l
}

// NoFile returns the process's current (soft) RLIMIT_NOFILE.
func NoFile() (uint64, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 0, fmt.Errorf("lineapi: getrlimit: %w", err)
	}
	return rl.Cur, nil
}

// conns counts the open connections, in total and by peer uid. Its zero
// value is not usable: see newConns.
type conns struct {
	lim Limits

	mu     sync.Mutex // guards the fields below
	total  int
	byUID  map[uint32]int
	peak   int  // the most open at once since the last scavenge
	queued bool // a scavenge is pending
	kick   chan struct{}
}

func newConns(lim Limits) *conns {
	return &conns{lim: lim, byUID: map[uint32]int{}, kick: make(chan struct{}, 1)}
}

// admit takes a slot for a connection of uid (known false: a peer without
// credentials, counted in the total only), or says why it cannot (and which
// limit, a metrics.Limit* reason).
func (c *conns) admit(uid uint32, known bool) (reason string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.total >= c.lim.MaxConns {
		return metrics.LimitConns, api.Errorf(api.ErrLimit, "arbord: too many connections (%d open, the limit is %d); close idle ones or retry later", c.total, c.lim.MaxConns)
	}
	if known && c.byUID[uid] >= c.lim.MaxConnsPerUID {
		return metrics.LimitPerUID, api.Errorf(api.ErrLimit, "arbord: too many connections from uid %d (%d open, the limit per uid is %d); close idle ones or retry later", uid, c.byUID[uid], c.lim.MaxConnsPerUID)
	}
	c.total++
	if known {
		c.byUID[uid]++
	}
	c.peak = max(c.peak, c.total)
	return "", nil
}

// release gives back a slot admit took. When a flood has subsided (the
// connections fell to an eighth of a peak of floodConns or more) it asks
// the scavenger to return the freed memory to the OS.
func (c *conns) release(uid uint32, known bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total--
	if known {
		if c.byUID[uid]--; c.byUID[uid] <= 0 {
			delete(c.byUID, uid)
		}
	}
	if c.peak >= floodConns && c.total <= c.peak/8 && !c.queued {
		c.queued = true
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
}

// open returns the number of open connections.
func (c *conns) open() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}

// scavenge runs until ctx ends: after each subsided flood (and a second's
// pause, so that a burst of closes is one scavenge) it runs
// debug.FreeOSMemory. Without it the runtime keeps the flood's heap and
// stacks mapped until its background scavenger gets to them, slowly, and
// only as far as the last GC's goal, which an idle daemon never revisits.
func (c *conns) scavenge(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
		debug.FreeOSMemory()
		c.mu.Lock()
		c.peak, c.queued = c.total, false
		c.mu.Unlock()
	}
}

// refuse answers c with one error line and closes it. The write cannot
// block for long: the socket is new, its buffer empty.
func refuse(c net.Conn, err error) {
	b, _ := json.Marshal(errorResponse(err))
	// A line to a new connection fits its socket buffer: the deadline only
	// bounds a peer that sent so much it filled it. It is generous, since
	// the accept loop is descheduled at times on a loaded machine (100 ms
	// once let a refused client see EOF instead of the reason).
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.Write(append(b, '\n'))
	c.Close()
}

// connUID returns the peer uid of c, if it is a Unix socket with
// credentials.
func connUID(c net.Conn) (uint32, bool) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0, false
	}
	uid, err := PeerUID(uc)
	return uid, err == nil
}

// outOfFiles reports whether err is the process or the system running out
// of descriptors.
func outOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// spare is one descriptor held in reserve so that, out of descriptors,
// the server can still accept a waiting connection to refuse it (and so
// drain the backlog) instead of failing accept in a loop while clients
// hang: the trick libevent and nginx use.
type spare struct{ fd int }

func newSpare() *spare {
	s := &spare{fd: -1}
	s.take()
	return s
}

func (s *spare) take() {
	if s.fd < 0 {
		if fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			s.fd = fd
		}
	}
}

// free gives the descriptor back to the process; it reports whether there
// was one.
func (s *spare) free() bool {
	if s.fd < 0 {
		return false
	}
	unix.Close(s.fd)
	s.fd = -1
	return true
}
