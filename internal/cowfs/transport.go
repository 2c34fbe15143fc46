package cowfs

import (
	"fmt"

	"github.com/arbor-dev/arbor/api"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// The transports of a mount's FUSE requests (Config.Transport).
const (
	// TransportAuto serves requests over io_uring where the kernel offers
	// it (Linux 6.14+, /sys/module/fuse/parameters/enable_uring = Y) and
	// reads and writes /dev/fuse elsewhere.
	TransportAuto = "auto"
	// TransportURing serves requests over io_uring or does not mount
	// (api.ErrUnavailable).
	TransportURing = "uring"
	// TransportDev reads and writes /dev/fuse.
	TransportDev = "dev"
)

// defaultTransport is the transport of a Config that names none: /dev/fuse.
// io_uring is opt-in (auto or uring) because its worker per CPU serves one
// request at a time: a request whose handler waits for another request of
// the same queue waits forever (a CI run hung so in
// TestOpenDuringLateRelease, whose hook holds a RELEASE while an OPEN of
// the same file comes; a blocking lock, a fork waiting for a writer's
// close are of the same kind). Handing requests to goroutines and their
// replies back to the ring's thread would lift that. The tests set it
// from ARBOR_FUSE_TRANSPORT (see TestMain) to run every mount test on one
// transport.
var defaultTransport = TransportDev

// wrapRawForTest, if set, wraps the filesystem a mount serves (the
// benchmarks time the requests inside the server with it).
var wrapRawForTest func(fuse.RawFileSystem) fuse.RawFileSystem

// CheckTransport reports whether t names a transport ("" is the default).
func CheckTransport(t string) error {
	switch t {
	case "", TransportAuto, TransportURing, TransportDev:
		return nil
	}
	return api.Errorf(api.ErrBadRequest, "cowfs: FUSE transport %q: want %s, %s or %s", t, TransportAuto, TransportURing, TransportDev)
}

// Transport says how the mount's requests reach the daemon: "io_uring",
// or "dev" (reads and writes of /dev/fuse) followed by the reason when
// io_uring was asked for and is not in use.
func (f *FS) Transport() string { return f.server.Transport() }

// URingRequests counts the requests the mount answered through io_uring.
func (f *FS) URingRequests() uint64 { return f.server.URingRequests() }

// checkURing is the mount's error when cfg asked for io_uring only and the
// server does not use it.
func checkURing(want, got string) error {
	if want != TransportURing || got == "io_uring" {
		return nil
	}
	return fmt.Errorf("FUSE over io_uring is not in use (%s): %w", got, api.ErrUnavailable)
}
