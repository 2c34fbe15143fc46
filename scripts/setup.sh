#!/usr/bin/env bash
# Installs what Arbor's tests and demo need on a fresh Debian machine:
# FUSE 3, the attr tools, python3 (and mypy, which type-checks the Python
# SDK), git, fuse-overlayfs (a benchmark peer), chromium (the web view's
# browser test drives it headless), util-linux (unshare, setsid: the
# process sandbox's tests and benchmark peer), bubblewrap (the sandbox's
# benchmark peer), mmdebstrap (builds root filesystem images), passt (pasta:
# sandboxes' outbound network), QEMU with the Debian cloud kernel, a static
# busybox and cpio (the vm backend's microVMs: guest kernel, guest tools,
# initramfs check), the Go modules, and the vm backend's guest agent
# (arbor-guest, static, installed next to go's binaries). Idempotent; quiet
# unless something fails.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
need=()
for p in fuse3 attr python3 python3-mypy git fuse-overlayfs chromium util-linux bubblewrap mmdebstrap passt qemu-system-x86 linux-image-cloud-amd64 busybox-static cpio; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "setup: missing packages ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
  fi
fi
[ -e /dev/fuse ] || { [ "$(id -u)" -eq 0 ] && mknod -m 0666 /dev/fuse c 10 229 || true; }
go mod download
# FUSE over io_uring (Linux 6.14+): mounts use it where it is on (cowfs
# transport auto, arbord turns it on at start too); only root can.
uring=/sys/module/fuse/parameters/enable_uring
if [ -e "$uring" ] && [ "$(id -u)" -eq 0 ] && [ "$(cat "$uring")" != Y ]; then
  echo Y >"$uring" && echo "setup: turned FUSE over io_uring on ($uring)"
fi
CGO_ENABLED=0 go build -o "$(go env GOPATH)/bin/arbor-guest" ./cmd/arbor-guest
