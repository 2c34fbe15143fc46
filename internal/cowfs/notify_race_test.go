// Regression tests from the review of the kernel-cache invalidation
// (notify.go): each failed before its fix.

package cowfs

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/arbor-dev/arbor/internal/store"
	"golang.org/x/sys/unix"
)

// A first lookup in one mount racing an attribute change (chmod) made
// through another: the NotifyContent may come before the kernel has the
// inode, and the lookup's answer is then cached for the full TTL.
func TestReviewLookupVsChmodRace(t *testing.T) {
	const n = 1000
	st := newStore(t, func(b string) {
		for i := 0; i < n; i++ {
			os.WriteFile(filepath.Join(b, fmt.Sprint("f", i)), nil, 0o644)
		}
	})
	if err := st.Fork(store.Main, "b"); err != nil {
		t.Fatal(err)
	}
	_, m1 := mountStore(t, st, "b", hour)
	_, m2 := mountStore(t, st, "b", hour)
	stale := 0
	for i := 0; i < n; i++ {
		name := fmt.Sprint("f", i)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); var s unix.Stat_t; unix.Lstat(filepath.Join(m2, name), &s) }()
		go func() { defer wg.Done(); os.Chmod(filepath.Join(m1, name), 0o600) }()
		wg.Wait()
		time.Sleep(200 * time.Microsecond)
		var s unix.Stat_t
		if err := unix.Lstat(filepath.Join(m2, name), &s); err != nil {
			t.Fatal(err)
		}
		if s.Mode&0o777 != 0o600 {
			time.Sleep(20 * time.Millisecond)
			unix.Lstat(filepath.Join(m2, name), &s)
			if s.Mode&0o777 != 0o600 {
				stale++
				if stale < 5 {
					t.Logf("%s: mode %o in the other mount after chmod", name, s.Mode&0o777)
				}
			}
		}
	}
	if stale > 0 {
		t.Errorf("%d of %d lookups cached a stale mode", stale, n)
	}
}
