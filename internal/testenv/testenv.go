// Package testenv says whether a test's requirements (root, FUSE, a tool)
// are met here: a test that needs what is missing skips with the reason,
// or fails when ARBOR_TEST_REQUIRE names that capability, so that nothing
// that should run in CI is skipped there silently.
//
// ARBOR_TEST_REQUIRE is "all" (every capability; scripts/test.sh sets it)
// or a comma-separated list of capability names: root, fuse, tmpfs,
// python3, fuse-overlayfs, overlayfs, chromium, cgroup, mmdebstrap,
// pasta, qemu. Unset or empty, every missing
// capability skips.
package testenv

import (
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The variable, and its capabilities.
const (
	Env = "ARBOR_TEST_REQUIRE"

	Root          = "root"
	FUSE          = "fuse"
	Tmpfs         = "tmpfs"
	Python        = "python3"
	FuseOverlayfs = "fuse-overlayfs"
	Overlayfs     = "overlayfs"
	Chromium      = "chromium" // Debian's chromium, for the web view's browser test
	// Cgroup: a cgroup hierarchy this process can create cgroups in
	// (cgroup2, or a v1 freezer), for process sandboxes.
	Cgroup = "cgroup"
	// Mmdebstrap builds root filesystem images (internal/image); Pasta
	// gives sandboxes outbound network (passt's pasta).
	Mmdebstrap = "mmdebstrap"
	Pasta      = "pasta"
	// QEMU: qemu-system-x86_64, a guest kernel (linux-image-cloud-amd64)
	// and a static busybox, for the vm backend.
	QEMU = "qemu"
)

// ImageCache is the image store tests that build images share, across
// packages and runs on one machine (images are cached by the hash of
// their inputs, so sharing is safe): a test run builds its images once.
func ImageCache() string {
	return filepath.Join(os.TempDir(), "arbor-test-images")
}

// HostGateway is the host's IPv4 default gateway (pasta maps it to the
// host's loopback inside a sandbox with outbound network); without one it
// skips t, or fails it when pasta is required.
func HostGateway(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("/proc/net/route")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 7 && f[1] == "00000000" && f[7] == "00000000" {
			raw, err := hex.DecodeString(f[2])
			if err != nil || len(raw) != 4 {
				t.Fatalf("gateway %q in /proc/net/route", f[2])
			}
			// /proc/net/route has the address in host (little-endian) order.
			return net.IPv4(raw[3], raw[2], raw[1], raw[0]).String()
		}
	}
	Missing(t, Pasta, "the host has no IPv4 default route for pasta to copy")
	return ""
}

// Required reports whether ARBOR_TEST_REQUIRE names capability (or is
// "all").
func Required(capability string) bool {
	for _, c := range strings.Split(os.Getenv(Env), ",") {
		if c = strings.TrimSpace(c); c == "all" || c == capability {
			return true
		}
	}
	return false
}

// Missing skips t with why, or fails it when capability is required. A
// name in ARBOR_TEST_REQUIRE that is no capability fails it too: a typo
// (or the old "1") must not quietly require nothing.
func Missing(t testing.TB, capability, why string) {
	t.Helper()
	for _, c := range strings.Split(os.Getenv(Env), ",") {
		if c = strings.TrimSpace(c); c != "" && c != "all" && !slices.Contains(Names(), c) {
			t.Fatalf("%s=%s: %q is no capability (all, or some of %s)", Env, os.Getenv(Env), c, strings.Join(Names(), ", "))
		}
	}
	if Required(capability) {
		t.Fatalf("%s (%s=%s requires %s)", why, Env, os.Getenv(Env), capability)
	}
	t.Skip(why)
}

// NeedRoot requires root.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, Root, "needs root: "+why)
	}
}

// NeedFUSE requires root and /dev/fuse, for direct FUSE mounts with
// passthrough.
func NeedFUSE(t testing.TB) {
	t.Helper()
	switch {
	case os.Geteuid() != 0:
		Missing(t, Root, "needs root for a direct FUSE mount")
	default:
		if _, err := os.Stat("/dev/fuse"); err != nil {
			Missing(t, FUSE, "needs /dev/fuse: "+err.Error())
		}
	}
}

// NeedCommand requires a program on PATH; capability names it for
// ARBOR_TEST_REQUIRE.
func NeedCommand(t testing.TB, capability, program string) {
	t.Helper()
	if _, err := exec.LookPath(program); err != nil {
		Missing(t, capability, program+" is not installed: "+err.Error())
	}
}

// Names lists the capabilities ARBOR_TEST_REQUIRE may name.
func Names() []string {
	return slices.Clone([]string{Root, FUSE, Tmpfs, Python, FuseOverlayfs, Overlayfs, Chromium, Cgroup, Mmdebstrap, Pasta, QEMU})
}

// NeedQEMU requires what a microVM needs: qemu-system-x86_64, a Debian
// cloud kernel in /boot and a static busybox.
func NeedQEMU(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		Missing(t, QEMU, "qemu-system-x86_64 is not installed: "+err.Error())
	}
	if ks, _ := filepath.Glob("/boot/vmlinuz-*-cloud-amd64"); len(ks) == 0 {
		Missing(t, QEMU, "no guest kernel /boot/vmlinuz-*-cloud-amd64 (linux-image-cloud-amd64)")
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		Missing(t, QEMU, "no static busybox (busybox-static): "+err.Error())
	}
}
