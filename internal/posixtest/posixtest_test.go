package posixtest_test

import (
	"fmt"
	"github.com/arbor-dev/arbor/internal/testenv"
	"testing"

	"github.com/arbor-dev/arbor/internal/posixtest"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { posixtest.Main(m) }

// TestTempDir is the baseline: the host's own filesystem (ext4 here) must
// pass the whole suite.
func TestTempDir(t *testing.T) {
	posixtest.Run(t, posixtest.TempDirEnv{})
}

// TestTmpfs runs the suite on tmpfs (/dev/shm), a second real kernel
// filesystem.
func TestTmpfs(t *testing.T) {
	const shm = "/dev/shm"
	var st unix.Statfs_t
	if err := unix.Statfs(shm, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		testenv.Missing(t, testenv.Tmpfs, fmt.Sprintf("%s is not a tmpfs (%v)", shm, err))
	}
	posixtest.Run(t, posixtest.TempDirEnv{Root: shm})
}
