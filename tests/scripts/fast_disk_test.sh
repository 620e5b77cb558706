#!/usr/bin/env bash
# scripts/fast-disk.sh: up makes mounted, direct-IO loop devices; a second up replaces the
# first's; down leaves no mount, loop device or image; a non-root caller is refused. Exit 77
# (skipped) when not root or without loop devices.
set -euo pipefail
script=$1
[[ $(id -u) -eq 0 ]] || { echo "not root: skipped"; exit 77; }
[[ -e /dev/loop-control ]] || modprobe loop 2>/dev/null || true
[[ -e /dev/loop-control ]] || { echo "no loop devices: skipped"; exit 77; }
trap 'bash "$script" down || true' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

mapfile -t dirs < <(bash "$script" up 2 64M)
[[ ${#dirs[@]} -eq 2 ]] || fail "up 2 printed ${#dirs[@]} directories"
for d in "${dirs[@]}"; do
  mountpoint -q "$d" || fail "$d is not mounted"
  dd if=/dev/zero of="$d/probe" bs=1M count=4 oflag=direct status=none || fail "no O_DIRECT write on $d"
done
mapfile -t again < <(bash "$script" up 1 64M)
[[ ${#again[@]} -eq 1 ]] || fail "a second up printed ${#again[@]} directories"
[[ $(bash "$script" status | wc -l) -eq 1 ]] || fail "a second up left the first's devices"
bash "$script" down
[[ -z $(bash "$script" status) ]] || fail "status after down is not empty"
! ls /dev/shm/tierkv-fast-disk-* >/dev/null 2>&1 || fail "an image is left in /dev/shm"
! losetup -a | grep -q tierkv-fast-disk || fail "a loop device is left"
! grep -q /mnt/tierkv-fast-disk /proc/mounts || fail "a mount is left"
if command -v setpriv >/dev/null; then
  if setpriv --reuid=65534 --regid=65534 --clear-groups bash "$script" up 1 64M 2>/tmp/fast-disk-nonroot.err; then
    fail "a non-root up succeeded"
  fi
  grep -q "must run as root" /tmp/fast-disk-nonroot.err || fail "the non-root refusal does not say why"
  rm -f /tmp/fast-disk-nonroot.err
fi
echo "fast-disk: ok"
