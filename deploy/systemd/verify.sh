#!/usr/bin/env bash
# Checks the units with `systemd-analyze verify` (where systemd is installed) and the config files with the
# real binary's parsers. ExecStart is pointed at the built binary so verify can check it exists.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:?usage: verify.sh PATH/TO/commwatch}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The example configs parse (each command validates its config, then fails fast on what it cannot do).
"$bin" agent --config "$here/agent.toml" --once --sysfs-root "$work" --node verify >/dev/null
echo "agent.toml: ok"
timeout 3 "$bin" collector --config "$here/collector.toml" --grpc-listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
  --state-dir "$work/state" >/dev/null 2>&1 || [ $? -eq 124 ]
echo "collector.toml: ok"

if ! command -v systemd-analyze >/dev/null; then
  echo "systemd-analyze not installed: unit verification skipped"
  exit 0
fi
for unit in commwatch-agent.service commwatch-collector.service; do
  sed "s#/usr/local/bin/commwatch#$bin#" "$here/$unit" >"$work/$unit"
  # Warnings about the unit not being installed or users not existing are not errors of the unit.
  out=$(systemd-analyze verify --man=no "$work/$unit" 2>&1 || true)
  bad=$(printf '%s\n' "$out" | grep -vE 'Failed to (connect|create)|not found|No such file|Failed to look up|^$|libvirt|Unknown (user|group)|Cannot add dependency|Transaction|proc-sys-fs' || true)
  if [ -n "$bad" ]; then
    printf '%s: systemd-analyze verify:\n%s\n' "$unit" "$bad"
    exit 1
  fi
  echo "$unit: ok"
done
