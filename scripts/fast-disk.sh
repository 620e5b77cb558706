#!/usr/bin/env bash
# RAM-backed loop devices standing in for fast NVMe drives (../shared/LIMITS.md): each is a file
# in /dev/shm attached with direct IO, formatted ext4 and mounted, so that `tierkv bench disk
# --dir` / `--dirs` measure the SSD tier against a device faster than this VM's virtio disk.
#
#   scripts/fast-disk.sh up [COUNT [SIZE]]   COUNT devices (default 1) of SIZE (default 3G);
#                                            prints the mount directories, one per line
#   scripts/fast-disk.sh down                unmounts, detaches and removes what `up` made
#   scripts/fast-disk.sh status              what is up now
#
# Root only (losetup, mount); refuses otherwise. The images are allocated in full at `up`. What `up` creates is recorded under
# /run/tierkv-fast-disk, and `up` first removes what an earlier run left (a killed run), so a
# second `up` never stacks devices. Memory: each device takes SIZE of RAM once written.
set -euo pipefail

state=/run/tierkv-fast-disk
mount_root=/mnt/tierkv-fast-disk

die() {
  echo "fast-disk: $*" >&2
  exit 1
}

need_root() {
  [[ $(id -u) -eq 0 ]] || die "must run as root (losetup and mount need it)"
  for tool in losetup mkfs.ext4 mount umount; do
    command -v "$tool" >/dev/null || die "$tool is missing (apt-get install -y util-linux e2fsprogs mount)"
  done
}

# Removes every device recorded in $state (mounts, loop devices, images), then the record.
down() {
  [[ -d $state ]] || return 0
  local entry dev img mnt
  for entry in "$state"/*; do
    [[ -f $entry ]] || continue
    read -r dev img mnt <"$entry" || true
    if [[ -n ${mnt:-} ]] && mountpoint -q "$mnt" 2>/dev/null; then
      umount "$mnt" || umount -l "$mnt" || echo "fast-disk: cannot unmount $mnt" >&2
    fi
    [[ -n ${mnt:-} && -d $mnt ]] && rmdir "$mnt" 2>/dev/null || true
    if [[ -n ${dev:-} ]] && losetup "$dev" >/dev/null 2>&1; then
      losetup -d "$dev" || echo "fast-disk: cannot detach $dev" >&2
    fi
    [[ -n ${img:-} ]] && rm -f "$img"
    rm -f "$entry"
  done
  rmdir "$state" 2>/dev/null || true
  rmdir "$mount_root" 2>/dev/null || true
}

up() {
  local count=${1:-1} size=${2:-3G}
  [[ $count =~ ^[1-8]$ ]] || die "COUNT must be 1 to 8 (got '$count')"
  [[ -d /dev/shm ]] || die "/dev/shm is missing: no RAM-backed file system for the images"
  down  # what an earlier (killed) run left
  mkdir -p "$state" "$mount_root"
  local i img dev mnt
  for ((i = 0; i < count; i++)); do
    img=/dev/shm/tierkv-fast-disk-$i.img
    mnt=$mount_root/$i
    rm -f "$img"
    # Allocated up front: a sparse image would allocate and zero RAM on each block's first
    # write, which makes the first writes of every run several times slower than later ones
    # (measured: tier demotion 1.8 to 6.4 GB/s on the same device) — no drive behaves so.
    fallocate -l "$size" "$img" || die "cannot allocate $size for $img in /dev/shm (free RAM?)"
    dev=$(losetup -f --show --direct-io=on "$img") || die "losetup of $img failed (no loop support?)"
    echo "$dev $img $mnt" >"$state/$i"
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$dev" >/dev/null
    mkdir -p "$mnt"
    mount "$dev" "$mnt"
    echo "$mnt"
  done
}

case ${1:-} in
  up)
    need_root
    shift
    # On a failure half way, leave nothing behind.
    trap 'down' ERR
    up "$@"
    trap - ERR
    ;;
  down)
    need_root
    down
    ;;
  status)
    if [[ -d $state ]]; then cat "$state"/* 2>/dev/null; fi
    ;;
  *)
    echo "usage: $0 up [COUNT [SIZE]] | down | status" >&2
    exit 2
    ;;
esac
