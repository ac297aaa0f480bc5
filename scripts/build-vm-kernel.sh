#!/usr/bin/env bash
# Fetches the guest kernel of the microVM rungs (sandbox/qemu, and the
# Firecracker rung's tests when no vmlinux is configured) and prints its
# path. It is Debian's own signed-off build, not one compiled here: the
# package is downloaded with apt-get (checked by apt against the archive's
# signatures) and unpacked with dpkg-deb, keeping boot/vmlinuz-RELEASE and
# lib/modules/RELEASE/ side by side, which is the layout sandbox/vm's
# ModulesDir looks for (the kernel's directory, then ../lib/modules/RELEASE).
# The drivers the guest needs (virtio_mmio, virtio_blk, virtio_console,
# ext4, vsock) are modules in Debian's kernel: evalsi's initramfs carries
# them and evalsi-guest loads them.
#
# Cached once per release at $EVALSI_CACHE/vmkernel/RELEASE/ (default
# /var/cache/evalsi for root, else ~/.cache/evalsi), with the symlink
# $EVALSI_CACHE/vmkernel/current -> RELEASE; a second run prints the cached
# path at once.
#
# The package is pinned by ABI name: Debian rebuilds linux-image-6.1.0-57-amd64
# in place for security point releases (apt's candidate here is 6.1.192-3)
# but a changed ABI gets a new package name, so a newer kernel is a deliberate
# edit of VMKERNEL_PACKAGE (apt-cache policy linux-image-amd64 names the
# current one).
#
# Usage: scripts/build-vm-kernel.sh [--cached]
#          (VMKERNEL_PACKAGE=linux-image-6.1.0-57-amd64 to change it)
#   --cached   print the cached kernel, or exit 3 without downloading
#              (tests use it: they never reach an outside address)
set -euo pipefail

VMKERNEL_PACKAGE=${VMKERNEL_PACKAGE:-linux-image-6.1.0-57-amd64}
release=${VMKERNEL_PACKAGE#linux-image-}
if [ -z "${EVALSI_CACHE:-}" ]; then
  if [ "$(id -u)" -eq 0 ]; then EVALSI_CACHE=/var/cache/evalsi; else EVALSI_CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/evalsi"; fi
fi
base="$EVALSI_CACHE/vmkernel"
dir="$base/$release"
kernel="$dir/boot/vmlinuz-$release"
# The modules directory is checked too: a kernel without its modules boots
# a guest that cannot find its disk.
if [ -f "$kernel" ] && [ -d "$dir/lib/modules/$release/kernel" ]; then
  # Kept pointing at the pinned release (a read-only cache is fine).
  ln -sfn "$release" "$base/current" 2>/dev/null || true
  echo "$kernel"
  exit 0
fi
if [ "${1:-}" = "--cached" ]; then
  echo "build-vm-kernel: no cached guest kernel at $kernel (run bash scripts/build-vm-kernel.sh, or .ci/setup)" >&2
  exit 3
fi
for tool in apt-get dpkg-deb; do
  command -v "$tool" >/dev/null || { echo "build-vm-kernel: $tool is missing (this script needs a Debian or Ubuntu host)" >&2; exit 1; }
done
mkdir -p "$base"
tmp=$(mktemp -d "$base/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "build-vm-kernel: downloading $VMKERNEL_PACKAGE with apt-get (about 70 MB)" >&2
# apt-get download writes into the current directory and needs no root; it
# fails with "Unable to locate package" when apt's lists lack the package
# (run apt-get update) or the ABI is gone from the archive (change
# VMKERNEL_PACKAGE).
(cd "$tmp" && apt-get download "$VMKERNEL_PACKAGE" >&2) || {
  echo "build-vm-kernel: apt-get download $VMKERNEL_PACKAGE failed: run apt-get update, or set VMKERNEL_PACKAGE to the package apt-cache policy linux-image-amd64 depends on" >&2
  exit 1
}
deb=$(ls "$tmp"/*.deb)
dpkg-deb -x "$deb" "$tmp/root"
[ -f "$tmp/root/boot/vmlinuz-$release" ] || { echo "build-vm-kernel: $deb has no boot/vmlinuz-$release" >&2; exit 1; }
[ -d "$tmp/root/lib/modules/$release/kernel" ] || { echo "build-vm-kernel: $deb has no lib/modules/$release/kernel" >&2; exit 1; }
# Only the kernel and its modules are kept (the package's /usr/share/doc and
# /usr/lib/linux are not needed); the directory appears whole, by rename.
mkdir -p "$tmp/out/boot" "$tmp/out/lib/modules"
mv "$tmp/root/boot/vmlinuz-$release" "$tmp/root/boot/config-$release" "$tmp/out/boot/"
mv "$tmp/root/lib/modules/$release" "$tmp/out/lib/modules/"
rm -rf "$dir"
mv "$tmp/out" "$dir"
ln -sfn "$release" "$base/current"
echo "$kernel"
