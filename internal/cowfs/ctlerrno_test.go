package cowfs

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/arbor-dev/arbor/api"
)

// TestCtlErrnoTable: the control file answers each row of api's error
// table with the row's errno, an errno under an error with that errno,
// and an ENOSPC under internal with ENOSPC.
func TestCtlErrnoTable(t *testing.T) {
	for _, k := range api.Errors() {
		if got := ctlErrno(fmt.Errorf("commit b: %w", api.Errorf(k.Err, "x"))); got != k.Errno {
			t.Errorf("ctlErrno(%s) = %v, want the table's %v", k.Code, got, k.Errno)
		}
	}
	if got := ctlErrno(fmt.Errorf("%w: %w", api.ErrInternal, syscall.ENOSPC)); got != syscall.ENOSPC {
		t.Errorf("ctlErrno(ENOSPC under internal) = %v", got)
	}
	if got := ctlErrno(fmt.Errorf("%w: %w", api.ErrState, syscall.EBUSY)); got != syscall.EBUSY {
		t.Errorf("ctlErrno(EBUSY under bad_state) = %v", got)
	}
}
