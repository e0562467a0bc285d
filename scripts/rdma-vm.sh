#!/usr/bin/env bash
# RDMA for real, in a VM: boots Debian's linux-image-amd64 with virtme-ng under QEMU (KVM where the CPU offers
# hardware virtualization, else software emulation), makes Soft-RoCE devices on a veth pair inside (rxe0 on
# veth0, rxe1 on veth1), and runs there the RDMA probe (`commwatch probe serve`/`run --transport rdma`),
# perftest's ib_write_bw/ib_send_lat on the same devices, the RDMA test binary (its ignored end-to-end test) and
# `commwatch agent --once`. Prints the figures and exits non-zero, with one line saying why, when the guest
# cannot boot or a check fails.
#
# Usage: scripts/rdma-vm.sh [--ci] [--reps N] [--release] [--keep-output DIR]
#   --ci               one probe run (default 1 MiB messages) and the test: what .ci/run runs
#   --reps N           without --ci: each probe and perftest measurement N times, alternating (default 3)
#   --release          run a release build of commwatch (default: the debug build, as the tests use)
#   --keep-output DIR  copy the guest's outputs (JSON, perftest text) to DIR
# Environment: CARGO_TARGET_DIR (where to build), COMMWATCH_RDMA_VM_CACHE (default ~/.cache/commwatch-rdma-vm:
# QEMU unpacked from Debian's packages, virtme-ng's venv), COMMWATCH_RDMA_VM_TIMEOUT (seconds for boot and checks,
# default 240 with --ci, else 900).
#
# What it installs when absent: the Debian packages below (apt), QEMU from Debian's qemu-system-x86 unpacked
# with dpkg -x into the cache (installing it would replace a newer qemu-utils), virtme-ng from PyPI in a venv
# of its own. What it leaves: only that cache; the guest, its devices and every temporary file go with it.
set -euo pipefail

die() {
  echo "rdma-vm: $*" >&2
  exit 1
}

mode=full
keep=
reps=3
profile=debug
while [ $# -gt 0 ]; do
  case $1 in
    --ci) mode=ci ;;
    --keep-output) keep=${2:?--keep-output needs a directory}; shift ;;
    --reps) reps=${2:?--reps needs a number}; shift ;;
    --release) profile=release ;;
    *) die "unknown argument $1 (usage: scripts/rdma-vm.sh [--ci] [--reps N] [--release] [--keep-output DIR])" ;;
  esac
  shift
done

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${COMMWATCH_RDMA_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/commwatch-rdma-vm}
# On a fresh machine neither it nor its parent exists yet (dpkg -x creates its target, not the parents).
mkdir -p "$cache"
[[ $reps =~ ^[1-9][0-9]?$ ]] || die "--reps takes 1 to 99 (got $reps)"
if [ "$mode" = ci ]; then limit=${COMMWATCH_RDMA_VM_TIMEOUT:-240}; else limit=${COMMWATCH_RDMA_VM_TIMEOUT:-900}; fi
target=${CARGO_TARGET_DIR:-$repo/target}
case $target in /*) ;; *) target=$repo/$target ;; esac
[ "$(uname -m)" = x86_64 ] || die "needs an x86_64 host (found $(uname -m))"

# --- packages --------------------------------------------------------------------------------------------
packages=(linux-image-amd64 busybox-static rdma-core ibverbs-utils perftest libibverbs-dev librdmacm-dev
  libclang-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
fi

# --- QEMU, unpacked (with the libraries and firmware it needs that the host lacks) -------------------------
qemu_root=$cache/qemu
qemu=$qemu_root/usr/bin/qemu-system-x86_64
qemu_libs=$qemu_root/usr/lib/x86_64-linux-gnu
qemu_debs=(qemu-system-x86 qemu-system-common qemu-system-data seabios ipxe-qemu libcapstone4 libfdt1 libpmem1
  libslirp0 libvdeplug2 libndctl6 libdaxctl1)
if [ ! -x "$qemu" ]; then
  echo "== unpacking QEMU into $qemu_root"
  debs=$(mktemp -d)
  # A machine whose package lists are stale or absent downloads after one update.
  (cd "$debs" && { apt-get download "${qemu_debs[@]}" >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get download "${qemu_debs[@]}" >/dev/null 2>&1; }; }) \
    || { rm -rf "$debs"; die "apt-get download ${qemu_debs[*]} failed"; }
  rm -rf "$qemu_root.new"
  for d in "$debs"/*.deb; do dpkg -x "$d" "$qemu_root.new"; done
  rm -rf "$debs" "$qemu_root"
  mv "$qemu_root.new" "$qemu_root"
fi
unresolved=$(LD_LIBRARY_PATH=$qemu_libs ldd "$qemu" | awk '/not found/ {print $1}' | tr '\n' ' ')
[ -z "$unresolved" ] || die "QEMU in $qemu_root lacks libraries: $unresolved"
qemu_firmware="-L $qemu_root/usr/share/seabios -L $qemu_root/usr/share/qemu -L $qemu_root/usr/lib/ipxe/qemu"

# --- virtme-ng ---------------------------------------------------------------------------------------------
venv=$cache/venv
if [ ! -x "$venv/bin/vng" ]; then
  echo "== installing virtme-ng into $venv"
  python3 -m venv "$venv" || die "python3 -m venv $venv failed"
  "$venv/bin/pip" install -q 'virtme-ng==1.42' || die "pip install virtme-ng failed"
fi

# --- the kernel: the newest Debian kernel with Soft-RoCE among its modules ---------------------------------
kernel=
for k in $(ls -1 /boot/vmlinuz-*-amd64 2>/dev/null | sort -V -r); do
  v=${k#/boot/vmlinuz-}
  if compgen -G "/lib/modules/$v/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko*" >/dev/null; then
    kernel=$k
    break
  fi
done
[ -n "$kernel" ] || die "no /boot/vmlinuz-*-amd64 with the rdma_rxe module (is linux-image-amd64 installed?)"

# --- the binaries the guest runs (it sees the host's filesystem, so their paths are the same) --------------
echo "== building commwatch ($profile) and the RDMA tests with --features rdma (in $target)"
release=()
[ "$profile" = release ] && release=(--release)
(cd "$repo" && CARGO_TARGET_DIR=$target cargo build --locked --quiet "${release[@]}" --bin commwatch --features rdma) \
  || die "cargo build --features rdma failed"
bin=$target/$profile/commwatch
testbin=$(cd "$repo" && CARGO_TARGET_DIR=$target cargo test --locked --quiet -p commwatch-probe --features rdma \
  --test rdma --no-run --message-format=json 2>/dev/null \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "rdma" and m.get("executable"):
        print(m["executable"])') || true
[ -x "$testbin" ] || die "cannot build the probe's rdma test binary"

# --- boot -------------------------------------------------------------------------------------------------
accel=(--disable-kvm)
how="software emulation (TCG)"
if [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then
  accel=()
  how="KVM"
fi
out=$(mktemp -d /tmp/commwatch-rdma-vm.XXXXXX)
vng_pid=
watch_pid=
# Ends the guest's whole process group (vng, virtme-run, QEMU): TERM, then KILL after 5 s.
stop_guest() {
  kill -TERM -- -"$1" 2>/dev/null || return 0
  for _ in $(seq 50); do
    kill -0 -- -"$1" 2>/dev/null || return 0
    sleep 0.1
  done
  kill -KILL -- -"$1" 2>/dev/null || true
}
cleanup() {
  [ -z "$watch_pid" ] || stop_guest "$watch_pid"
  if [ -n "$vng_pid" ]; then
    stop_guest "$vng_pid"
    wait "$vng_pid" 2>/dev/null || true
  fi
  rm -rf "$out"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== booting $(basename "$kernel") with virtme-ng under $how (limit ${limit}s)"
start=$(date +%s.%N)
# Its own process group, so stopping it takes QEMU with it; vng's console output goes through cat (it wants a
# pipe, not a terminal).
set -m
(
  PATH=$venv/bin:$PATH LD_LIBRARY_PATH=$qemu_libs \
    vng --run "$kernel" "${accel[@]}" --qemu "$qemu" --qemu-opts="$qemu_firmware" --memory 2G --cpus 2 \
    --rwdir "$out" --exec "bash $repo/scripts/rdma-vm/guest.sh $out $bin $testbin $mode $reps" \
    </dev/null 2>&1 | cat >"$out/console.txt"
) &
vng_pid=$!
# The limit covers boot and checks: past it a watchdog ends the guest's group (vng, virtme-run and QEMU all
# stay in it).
( sleep "$limit"; touch "$out/.timed-out"; stop_guest "$vng_pid" ) &
watch_pid=$!
set +m
rc=0
wait "$vng_pid" || rc=$?
stop_guest "$watch_pid"
wait "$watch_pid" 2>/dev/null || true
watch_pid=
[ -e "$out/.timed-out" ] && rc=124
vng_pid=
wall=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
[ -n "$keep" ] && mkdir -p "$keep" && cp -r "$out"/. "$keep"/

fig=$out/figures
if [ ! -s "$fig" ]; then
  last=$({ grep -v '^\s*$' "$out/console.txt" 2>/dev/null || true; } | tail -1 | cut -c1-200)
  die "the guest did not boot within ${limit}s under $how (exit $rc; last console line: ${last:-none})"
fi
python3 "$repo/scripts/rdma-vm/report.py" "$out" "$mode" "$how, $profile build" "$wall"
