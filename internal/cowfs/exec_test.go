package cowfs

import (
	"os"
	"os/exec"
	"testing"

	"github.com/arbor-dev/arbor/internal/store"
)

// TestExecBaseFile: programs of the base run through the mount, in main and
// in a branch (an exec's OPEN carries the kernel's FMODE_EXEC). A shell
// execs them, not this process: a process that serves the mount must not
// exec from it itself (the fork waits for the exec, which waits for the
// server).
func TestExecBaseFile(t *testing.T) {
	st := newStore(t, func(base string) {
		os.WriteFile(base+"/run.sh", []byte("#!/bin/sh\necho hi\n"), 0o755)
		data, err := os.ReadFile("/bin/true")
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(base+"/true", data, 0o755)
	})
	if err := st.Fork(store.Main, "x"); err != nil {
		t.Fatal(err)
	}
	for _, branch := range []string{store.Main, "x"} {
		_, mnt := mountStore(t, st, branch, hour)
		out, err := exec.Command("/bin/sh", "-c", `"$0"/run.sh && "$0"/true && echo ok`, mnt).CombinedOutput()
		if err != nil || string(out) != "hi\nok\n" {
			t.Errorf("%s: %q %v", branch, out, err)
		}
	}
}
