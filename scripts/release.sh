#!/usr/bin/env bash
# release.sh: builds a versioned release of commwatch with SHA-256 checksums.
#
#   scripts/release.sh [--out DIR] [--binary PATH] [--image NAME] [--no-image]
#
# In DIR (default dist/), for version V of the workspace and this machine's architecture A:
# - commwatch-V-A-linux-gnu.tar.gz: commwatch-V/bin/commwatch (stripped of its debug information; symbols kept
#   for backtraces), the deployment files (deploy/, dashboards/, links resolved), README.md,
#   CHANGELOG.md, SECURITY.md, docs/.
# - commwatch-V-A-linux-gnu.debug.tar.gz: commwatch.debug, the binary's debug information, split off with
#   objcopy; the binary names it (.gnu_debuglink), so gdb and perf find it beside the binary or under
#   /usr/lib/debug/usr/local/bin/commwatch.debug.
# - commwatch-V-image.tar: the container image NAME:V (scripts/build-image.sh) as an OCI archive, unless
#   --no-image (it needs root, buildah and debootstrap). NAME is --image, else $COMMWATCH_IMAGE, else
#   build-image.sh's default.
# - SHA256SUMS: `sha256sum -c SHA256SUMS` in DIR checks every file above.
#
# By default the binary is `cargo build --release --locked -p commwatch` built with its debug information (the
# release profile strips it: `cargo build --release` alone gives the binary to install); --binary PATH packages
# that file instead (CI packages the binary its tests built). Needs cargo, objcopy (binutils), tar, gzip,
# sha256sum.
set -euo pipefail
cd "$(dirname "$0")/.."

out=dist
binary=""
image=${COMMWATCH_IMAGE:-}
with_image=1
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    --image) image=$2; shift 2 ;;
    --no-image) with_image=0; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "release.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
for tool in objcopy tar gzip sha256sum; do
  command -v "$tool" >/dev/null || { echo "release.sh: $tool not found (apt-get install binutils coreutils)" >&2; exit 2; }
done

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$version" ] || { echo "release.sh: no version in Cargo.toml's [workspace.package]" >&2; exit 1; }
arch=$(uname -m)
name=commwatch-$version-$arch-linux-gnu

if [ -z "$binary" ]; then
  echo "== cargo build --release (with debug information, to split it off)"
  cargo build --release --locked -p commwatch --config 'profile.release.strip="none"'
  binary=${CARGO_TARGET_DIR:-target}/release/commwatch
fi
[ -x "$binary" ] || { echo "release.sh: $binary is not an executable" >&2; exit 2; }

mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
stage=$work/commwatch-$version

echo "== binary: debug information split off"
mkdir -p "$stage/bin" "$work/debug"
objcopy --only-keep-debug "$binary" "$work/debug/commwatch.debug"
objcopy --strip-debug --add-gnu-debuglink="$work/debug/commwatch.debug" "$binary" "$stage/bin/commwatch"
chmod 0755 "$stage/bin/commwatch"
said=$("$stage/bin/commwatch" --version)
case $said in
  "commwatch $version "*) ;;
  *) echo "release.sh: the binary says \"$said\", not version $version" >&2; exit 1 ;;
esac
echo "$said"
size() { stat -c %s "$1"; }
echo "binary $(size "$binary") bytes -> $(size "$stage/bin/commwatch") bytes; debug information $(size "$work/debug/commwatch.debug") bytes"

echo "== tarballs"
# -L: dashboards/ and deploy/prometheus/rules/ are links to the chart's files/; the tarball holds files.
cp -rL deploy dashboards docs "$stage/"
cp README.md CHANGELOG.md SECURITY.md "$stage/"
# Reproducible order, owner and times: the same inputs give the same bytes.
mtime=$(git log -1 --format=%cI 2>/dev/null || echo "1970-01-01T00:00:00Z")
pack() {
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="$mtime" -C "$1" -cf - "$2" | gzip -n >"$3"
}
pack "$work" "commwatch-$version" "$out/$name.tar.gz"
pack "$work/debug" commwatch.debug "$out/$name.debug.tar.gz"
files=("$name.tar.gz" "$name.debug.tar.gz")

if [ "$with_image" -eq 1 ]; then
  echo "== container image"
  image_args=(--binary "$stage/bin/commwatch" --tag "$version")
  [ -n "$image" ] && image_args+=(--image "$image")
  scripts/build-image.sh "${image_args[@]}"
  ref=${image:-$(sed -n 's/^image=\${COMMWATCH_IMAGE:-\(.*\)}$/\1/p' scripts/build-image.sh)}:$version
  rm -f "$out/commwatch-$version-image.tar"
  buildah --storage-driver vfs push "$ref" "oci-archive:$out/commwatch-$version-image.tar:$ref"
  files+=("commwatch-$version-image.tar")
fi

echo "== checksums"
(cd "$out" && sha256sum "${files[@]}" >SHA256SUMS && cat SHA256SUMS)
echo "release.sh: $out"
