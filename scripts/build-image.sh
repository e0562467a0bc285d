#!/usr/bin/env bash
# build-image.sh: builds the commwatch container image (Containerfile) with buildah and runs it.
#
#   scripts/build-image.sh [--binary PATH | --compile] [--image NAME] [--tag TAG]
#                          [--runtime-image IMAGE] [--rebuild-base] [--no-check]
#
# 1. The runtime base. With --runtime-image, that image (e.g. gcr.io/distroless/cc-debian12:nonroot where a
#    registry can be reached). Otherwise one assembled from Debian packages, the way distroless is: debootstrap
#    (variant minbase) into a directory, then only the files of the packages the binary needs (libc6, libgcc-s1,
#    ca-certificates; base-files, netbase, tzdata for /etc) plus /etc/passwd and /etc/group naming uid 65532,
#    imported with buildah as localhost/commwatch-base:$DEBIAN_SUITE. It stays in buildah's storage and is
#    reused by later runs; --rebuild-base assembles it again.
# 2. The image, tagged NAME:TAG (default ghcr.io/example/commwatch:<workspace version>, the name the Kubernetes
#    manifests and the Helm chart use). By default from the release binary (BINARY_FROM=prebuilt): it runs
#    `cargo build --release --locked -p commwatch` (nothing to do when it is current) and gives buildah a
#    context holding only target/release/commwatch, its debug information stripped (objcopy --strip-debug;
#    symbols stay for backtraces). --binary PATH takes that file instead, without cargo.
#    --compile builds inside (BINARY_FROM=builder; needs the BUILDER_IMAGE of the Containerfile, i.e. a
#    registry).
# 3. The check, unless --no-check: `commwatch --version` and `commwatch agent --once` on the repository's sysfs
#    fixture (agent/tests/fixtures/h100_additions), inside a container of the image, as its user; the agent must
#    list the fixture's links with their roles.
#
# Needs root, buildah (--storage-driver vfs, --isolation chroot: no daemon, no user namespaces, no overlay
# mounts), debootstrap and a Debian mirror (DEBIAN_MIRROR, default http://deb.debian.org/debian; DEBIAN_SUITE,
# default bookworm), python3 for the check. On Debian: apt-get install buildah debootstrap. Push the result with
# `buildah --storage-driver vfs push NAME:TAG docker://REGISTRY/...`.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
# The image's name: --image, else $COMMWATCH_IMAGE (your registry, e.g. registry.example.org/ops/commwatch), else
# the name the Kubernetes manifests and the chart run until you set theirs (README, "Install").
image=${COMMWATCH_IMAGE:-ghcr.io/example/commwatch}
tag=$version
binary=""
mode=prebuilt
runtime_image=""
rebuild_base=0
check=1
suite=${DEBIAN_SUITE:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
base_image=localhost/commwatch-base:$suite
# The packages whose files make the runtime base: the binary's shared libraries (ldd: libc, libm, libgcc_s),
# the CA bundle for HTTPS, and the few /etc files programs expect.
base_packages=(libc6 libgcc-s1 ca-certificates base-files netbase tzdata)

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
while [ $# -gt 0 ]; do
  case $1 in
    --binary) binary=$2; shift 2 ;;
    --compile) mode=builder; shift ;;
    --image) image=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --runtime-image) runtime_image=$2; shift 2 ;;
    --rebuild-base) rebuild_base=1; shift ;;
    --no-check) check=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "build-image.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done

[ "$(id -u)" -eq 0 ] || { echo "build-image.sh: run as root (buildah with the vfs driver and chroot isolation)" >&2; exit 2; }
for tool in buildah python3; do
  command -v "$tool" >/dev/null || { echo "build-image.sh: $tool not found (apt-get install buildah)" >&2; exit 2; }
done
bah=(buildah --storage-driver vfs)
work=$(mktemp -d)
tree=""
ctr=""
cleanup() {
  # debootstrap leaves the tree's /proc mounted when it runs inside a container.
  if [ -n "$tree" ] && mountpoint -q "$tree/proc" 2>/dev/null; then umount -l "$tree/proc" || true; fi
  if [ -n "$ctr" ]; then "${bah[@]}" rm "$ctr" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
started=$(date +%s)
step() { echo "== $* (t+$(($(date +%s) - started))s)"; }

# Copies every file of the packages in $base_packages from the debootstrap tree $1 to $2, keeping symbolic
# links as links and resolving the tree's merged-/usr directory links (/lib -> usr/lib) so that a file lands
# where it lies in the tree.
copy_package_files() {
  local from=$1 to=$2 f src dir
  for f in bin sbin lib lib64; do
    if [ -L "$from/$f" ]; then cp -a "$from/$f" "$to/"; fi
  done
  for p in "${base_packages[@]}"; do
    dpkg-query --admindir="$from/var/lib/dpkg" -L "$p"
  done | sort -u | while read -r f; do
    src=$from$f
    if [ -d "$src" ] && [ ! -L "$src" ]; then continue; fi  # directories come with their files
    if [ ! -e "$src" ] && [ ! -L "$src" ]; then continue; fi  # diverted or removed by a maintainer script
    dir=$(realpath "$(dirname "$src")")
    case $dir in "$from"|"$from"/*) ;; *) echo "build-image.sh: $f leaves the tree" >&2; exit 1 ;; esac
    mkdir -p "$to${dir#"$from"}"
    cp -a "$src" "$to${dir#"$from"}/"
  done
}

# The files no package owns: generated at install (CA bundle, linker cache) or written for the image (users).
write_base_etc() {
  local from=$1 to=$2
  mkdir -p "$to/etc/ssl" "$to/tmp" "$to/home/nonroot" "$to/usr/local/bin"
  chmod 1777 "$to/tmp"
  cp -a "$from/etc/ssl/certs" "$to/etc/ssl/"
  cp -a "$from/etc/ld.so.conf" "$from/etc/ld.so.cache" "$to/etc/"
  cat >"$to/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
  cat >"$to/etc/group" <<'EOF'
root:x:0:
nogroup:x:65534:
nonroot:x:65532:
EOF
  printf 'passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n' \
    >"$to/etc/nsswitch.conf"
  chown 65532:65532 "$to/home/nonroot"
  chmod 0700 "$to/home/nonroot"
}

assemble_base() {
  command -v debootstrap >/dev/null || { echo "build-image.sh: debootstrap not found (apt-get install debootstrap)" >&2; exit 2; }
  step "runtime base: debootstrap $suite from $mirror"
  tree=$work/debootstrap
  local includes
  includes=$(IFS=,; echo "${base_packages[*]}")
  if ! debootstrap --variant=minbase --include="$includes" "$suite" "$tree" "$mirror" >"$work/debootstrap.log" 2>&1; then
    tail -n 30 "$work/debootstrap.log" >&2
    echo "build-image.sh: debootstrap failed (full log above)" >&2
    exit 1
  fi
  if mountpoint -q "$tree/proc"; then umount -l "$tree/proc"; fi
  tree=$(realpath "$tree")
  step "runtime base: the files of ${base_packages[*]}"
  local root=$work/base
  mkdir -p "$root"
  copy_package_files "$tree" "$root"
  write_base_etc "$tree" "$root"
  echo "   $(du -sh --apparent-size "$root" | cut -f1) from a $(du -sh --apparent-size "$tree" | cut -f1) minbase tree"
  step "runtime base: import as $base_image"
  local c mnt
  c=$("${bah[@]}" from scratch)
  ctr=$c
  mnt=$("${bah[@]}" mount "$c")
  cp -a "$root/." "$mnt/"
  "${bah[@]}" unmount "$c" >/dev/null
  "${bah[@]}" config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --label org.opencontainers.image.description="glibc runtime assembled from Debian $suite packages: ${base_packages[*]}" \
    "$c"
  "${bah[@]}" commit --rm "$c" "$base_image" >/dev/null
  ctr=""
}

# 1. The runtime base.
if [ -z "$runtime_image" ]; then
  runtime_image=$base_image
  if [ "$rebuild_base" -eq 1 ] || ! "${bah[@]}" inspect --type image "$base_image" >/dev/null 2>&1; then
    old_base=$("${bah[@]}" images --quiet --no-trunc "$base_image" 2>/dev/null || true)
    assemble_base
    # The base it replaces, unless an image still stands on it.
    if [ -n "$old_base" ]; then "${bah[@]}" rmi "$old_base" >/dev/null 2>&1 || true; fi
  else
    step "runtime base: $base_image (already built; --rebuild-base to redo it)"
  fi
fi

# 2. The image.
context=$repo
if [ "$mode" = prebuilt ]; then
  if [ -z "$binary" ]; then
    step "cargo build --release --locked -p commwatch"
    cargo build --release --locked -p commwatch
    binary=${CARGO_TARGET_DIR:-target}/release/commwatch
  fi
  [ -x "$binary" ] || { echo "build-image.sh: $binary is not an executable" >&2; exit 2; }
  context=$work/context
  mkdir -p "$context/target/release"
  # As the Containerfile's builder does: without the line tables of the release profile, symbols kept.
  if command -v objcopy >/dev/null; then
    objcopy --strip-debug "$binary" "$context/target/release/commwatch"
  else
    echo "   objcopy not found (binutils): the binary goes in with its debug information"
    cp "$binary" "$context/target/release/commwatch"
  fi
  echo "   binary: $(du -h --apparent-size "$binary" | cut -f1) built," \
    "$(du -h --apparent-size "$context/target/release/commwatch" | cut -f1) in the image"
fi
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)
step "image $image:$tag (BINARY_FROM=$mode, RUNTIME_IMAGE=$runtime_image)"
dangling() { "${bah[@]}" images --quiet --no-trunc --filter dangling=true | sort; }
dangling >"$work/dangling.before"
"${bah[@]}" build --isolation chroot -f "$repo/Containerfile" \
  --build-arg BINARY_FROM="$mode" --build-arg RUNTIME_IMAGE="$runtime_image" \
  --build-arg VERSION="$version" --build-arg REVISION="$revision" \
  -t "$image:$tag" "$context"
# The intermediate stages' images (the binary alone) are of no use once the image holds it; buildah keeps a
# working container of the `binary` stage, which holds them.
for id in $(dangling | comm -13 "$work/dangling.before" -); do
  "${bah[@]}" containers --all --notruncate --format '{{.ContainerID}} {{.ImageID}}' \
    | awk -v id="${id#sha256:}" '$2 == id { print $1 }' | xargs -r "${bah[@]}" rm >/dev/null
  "${bah[@]}" rmi "$id" >/dev/null
done
echo "   $image:$tag: $("${bah[@]}" images --noheading --format '{{.Size}}' "$image:$tag") uncompressed," \
  "runtime base $("${bah[@]}" images --noheading --format '{{.Size}}' "$runtime_image" 2>/dev/null || echo '?')"

# 3. The check: the binary runs in the image, as the image's user, and the agent reads a sysfs tree.
if [ "$check" -eq 1 ]; then
  step "check: commwatch --version and agent --once inside $image:$tag"
  ctr=$("${bah[@]}" from --pull=never "$image:$tag")
  "${bah[@]}" copy --chown 65532:65532 "$ctr" agent/tests/fixtures/h100_additions /check/sysfs >/dev/null
  mkdir -p "$work/empty"
  "${bah[@]}" copy --chown 65532:65532 "$ctr" "$work/empty" /check/proc >/dev/null
  in_image() { "${bah[@]}" run --isolation chroot --user 65532:65532 "$ctr" -- /usr/local/bin/commwatch "$@"; }
  in_image --version | tee "$work/version.txt"
  grep -q "^commwatch $version" "$work/version.txt" || { echo "build-image.sh: --version does not say $version" >&2; exit 1; }
  in_image agent --once --node image-check --sysfs-root /check/sysfs --procfs-root /check/proc \
    --steps-socket off --steps-udp off >"$work/once.json" 2>"$work/once.err" \
    || { cat "$work/once.err" >&2; echo "build-image.sh: agent --once failed in the image" >&2; exit 1; }
  python3 - "$work/once.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
links = {(l["device"], l["port"]): l["role"] for l in doc["links"]}
want = {("eth0", "eth0"): "management", ("ib0", "ib0"): "fabric", ("ens1f0np0", "ens1f0np0"): "fabric"}
missing = {k: v for k, v in want.items() if links.get(k) != v}
if doc["node"] != "image-check" or missing:
    sys.exit(f"agent --once in the image: node {doc['node']!r}, links {links}; expected {want}")
print(f"   agent --once: {len(doc['links'])} links, {len(doc['samples'])} samples, "
      f"sysfs_root {doc['sysfs_root']}")
EOF
  "${bah[@]}" rm "$ctr" >/dev/null
  ctr=""
fi
step "done: $image:$tag"
