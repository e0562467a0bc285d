#!/usr/bin/env bash
# Checks the units with `systemd-analyze verify` and the sysusers.d file with `systemd-sysusers --root` (where
# systemd is installed), and the config files with the real binary's parsers. ExecStart is pointed at the
# built binary so verify can check it exists.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:?usage: verify.sh PATH/TO/commwatch}
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The example configs name TLS files under /etc/commwatch/tls: make a throwaway CA and collector certificate
# and point copies of the configs at them.
mkdir -p "$work/tls"
(
  cd "$work/tls"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=verify-ca -keyout ca.key -out ca.pem 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=collector.example -keyout collector.key -out collector.csr \
    2>/dev/null
  printf 'subjectAltName=DNS:collector.example\n' >ext.cnf
  openssl x509 -req -in collector.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile ext.cnf \
    -out collector.pem 2>/dev/null
)
for f in agent.toml collector.toml; do
  sed "s#/etc/commwatch/tls/#$work/tls/#" "$here/$f" >"$work/$f"
done

# The example configs parse (each command validates its config, then fails fast on what it cannot do).
"$bin" agent --config "$work/agent.toml" --once --sysfs-root "$work" --node verify >/dev/null
echo "agent.toml: ok"
# As written (0.0.0.0 with [tls]) the transport rule passes; the collector must still be running after 3 s.
timeout 3 "$bin" collector --config "$work/collector.toml" --http-listen 127.0.0.1:0 \
  --grpc-listen 127.0.0.1:0 --state-dir "$work/state" >"$work/collector.log" 2>&1 || [ $? -eq 124 ] || {
  cat "$work/collector.log"
  exit 1
}
echo "collector.toml: ok"
# Without [tls] a non-loopback listener is refused unless plain text is allowed explicitly.
sed '/^\[tls\]/,$d' "$work/collector.toml" >"$work/plain.toml"
if "$bin" collector --config "$work/plain.toml" --grpc-listen 0.0.0.0:0 --http-listen 127.0.0.1:0 \
  >"$work/plain.log" 2>&1; then
  echo "collector.toml without [tls]: started in plain text off loopback without allow_plaintext"
  exit 1
fi
grep -q allow_plaintext "$work/plain.log" || { cat "$work/plain.log"; exit 1; }
echo "plain text off loopback without allow_plaintext: refused"

# The sysusers.d file creates the agent's user and group (in a scratch root, not on this machine).
if command -v systemd-sysusers >/dev/null; then
  mkdir -p "$work/sysroot/etc"
  # From stdin: a file argument would be looked up inside the root.
  systemd-sysusers --root="$work/sysroot" - <"$here/commwatch.sysusers" >/dev/null 2>&1
  user=$(grep '^commwatch:' "$work/sysroot/etc/passwd" || true)
  uid=$(printf '%s' "$user" | cut -d: -f3)
  if [ -z "$user" ] || ! grep -q '^commwatch:' "$work/sysroot/etc/group" || [ "$uid" -ge 1000 ] \
      || ! printf '%s' "$user" | grep -q 'nologin$'; then
    printf 'commwatch.sysusers: expected a system user commwatch with its group and no login shell:\n%s\n' "$user"
    exit 1
  fi
  echo "commwatch.sysusers: ok (system user commwatch, uid $uid)"
else
  echo "systemd-sysusers not installed: commwatch.sysusers not checked"
fi

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
