// Package testenv says whether a test's requirements (root, FUSE) are met
// here: a test that needs what is missing skips with the reason, or fails
// when ARBOR_TEST_REQUIRE is set (CI sets it, so that nothing that should
// run there is skipped silently).
package testenv

import (
	"os"
	"testing"
)

// Missing skips t with why, or fails it when ARBOR_TEST_REQUIRE is set.
func Missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("ARBOR_TEST_REQUIRE") != "" {
		t.Fatalf("%s (ARBOR_TEST_REQUIRE is set)", why)
	}
	t.Skip(why)
}

// NeedFUSE requires root and /dev/fuse, for direct FUSE mounts with
// passthrough.
func NeedFUSE(t testing.TB) {
	t.Helper()
	switch {
	case os.Geteuid() != 0:
		Missing(t, "needs root for a direct FUSE mount")
	default:
		if _, err := os.Stat("/dev/fuse"); err != nil {
			Missing(t, "needs /dev/fuse")
		}
	}
}

// NeedRoot requires root (to switch credentials, make bind mounts).
func NeedRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "needs root")
	}
}
