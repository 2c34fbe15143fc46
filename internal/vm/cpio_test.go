package vm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestInitrd: the initramfs is a newc archive cpio lists, with the agent as
// /init, busybox's applets and the modules.
func TestInitrd(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Skip("no cpio to read the archive back")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if a := os.Getenv("ARBOR_VM_AGENT"); a != "" {
		self = a
	}
	cfg := Config{Agent: self, Busybox: "/bin/busybox"}
	ks, _ := filepath.Glob("/boot/vmlinuz-*-cloud-amd64")
	if len(ks) == 0 {
		t.Skip("no guest kernel")
	}
	cfg.Kernel = ks[len(ks)-1]
	p := filepath.Join(t.TempDir(), "initrd")
	if d := os.Getenv("ARBOR_VM_INITRD_OUT"); d != "" {
		p = d
	}
	if err := packInitrd(p, cfg, filepath.Join("/usr/lib/modules", kernelVersion(cfg.Kernel)), nil); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", "-c", "cpio -t < "+p).CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -t: %v: %s", err, out)
	}
	for _, want := range []string{"init", "bin/sh", "bin/busybox", "lib/modules/virtio_console.ko", "etc/arbor/modules", "dev/console"} {
		if !strings.Contains("\n"+string(out), "\n"+want+"\n") {
			t.Fatalf("the archive lacks %s:\n%s", want, out)
		}
	}
}

// TestSeedCopiesAcrossFilesystems: where a link cannot be made (another
// filesystem), Seed copies the state.
func TestSeedCopiesAcrossFilesystems(t *testing.T) {
	src := t.TempDir()
	for _, f := range []string{"m", "d"} {
		if err := os.WriteFile(filepath.Join(src, f), []byte("state "+f), 0o400); err != nil {
			t.Fatal(err)
		}
	}
	dst := "/dev/shm/arbor-vm-seed-test" // tmpfs: another filesystem than TempDir's, mostly
	os.RemoveAll(dst)
	t.Cleanup(func() { os.RemoveAll(dst) })
	if err := Seed(dst, filepath.Join(src, "m"), filepath.Join(src, "d")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, MemFile)); err != nil || string(b) != "state m" {
		t.Fatalf("mem %q %v", b, err)
	}
	if !HasState(dst) {
		t.Fatal("no state after Seed")
	}
}
