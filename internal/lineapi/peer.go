package lineapi

import (
	"errors"
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/arbor-dev/arbor/internal/access"
)

// PeerCred returns the credentials of the process at the other end of c as
// they were when it connected: uid and gid from SO_PEERCRED, supplementary
// groups from SO_PEERGROUPS (the kernel's record, not /proc/PID, whose pid
// may be reused by then).
func PeerCred(c *net.UnixConn) (access.Cred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return access.Cred{}, err
	}
	var cred access.Cred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		uc, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			cerr = fmt.Errorf("SO_PEERCRED: %w", err)
			return
		}
		cred.UID, cred.GID = uc.Uid, uc.Gid
		cred.Groups, cerr = peerGroups(int(fd))
	}); err != nil {
		return access.Cred{}, err
	}
	return cred, cerr
}

func peerGroups(fd int) ([]uint32, error) {
	n := 64
	for {
		buf := make([]uint32, n)
		l := uint32(4 * n)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&l)), 0)
		switch {
		case e == 0:
			return buf[:l/4], nil
		case errors.Is(e, unix.ERANGE) && int(l/4) > n:
			n = int(l / 4)
		default:
			return nil, fmt.Errorf("SO_PEERGROUPS: %w", e)
		}
	}
}
