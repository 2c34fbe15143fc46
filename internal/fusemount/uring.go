package fusemount

import (
	"errors"
	"os"
	"strings"
)

// URingParam is the FUSE module's switch for FUSE over io_uring (Linux
// 6.14+, CONFIG_FUSE_IO_URING); only root can set it.
const URingParam = "/sys/module/fuse/parameters/enable_uring"

// ErrNoURing: the kernel has no FUSE over io_uring.
var ErrNoURing = errors.New("the kernel has no FUSE over io_uring (Linux 6.14+, CONFIG_FUSE_IO_URING)")

// EnableURing turns FUSE over io_uring on when the kernel has it and it is
// off, which needs root. It reports whether it is on afterwards and whether
// this call turned it on; err says why it is off (ErrNoURing, or the write
// refused).
func EnableURing() (on, changed bool, err error) {
	b, err := os.ReadFile(URingParam)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return false, false, ErrNoURing
		}
		return false, false, err
	}
	if v := strings.TrimSpace(string(b)); v == "Y" || v == "1" {
		return true, false, nil
	}
	if err := os.WriteFile(URingParam, []byte("Y\n"), 0); err != nil {
		return false, false, err
	}
	return true, true, nil
}
