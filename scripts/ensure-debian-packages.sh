#!/usr/bin/env bash
# Install the named Debian packages when their programs are missing. The tests need promtool and
# prometheus (end-to-end), nginx, jsonnet and chromium (tests/support.py's require() fails in CI
# without them), the benchmarks nginx, the image build podman, buildah, runc and mmdebstrap.
# Idempotent; quiet when all is present.
set -euo pipefail
declare -A probe=([prometheus]=promtool [nginx]=nginx)
missing=()
for pkg in "$@"; do
  bin=${probe[$pkg]:-$pkg}
  command -v "$bin" >/dev/null 2>&1 || [ -x "/usr/sbin/$bin" ] || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "missing Debian packages: ${missing[*]} (run as root or: apt-get install ${missing[*]})" >&2
    exit 1
  fi
else SUDO=; fi
echo "installing Debian packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The Debian prometheus package starts a system service; the tests run their own instances.
if [[ " ${missing[*]} " == *" prometheus "* ]]; then
  (systemctl disable --now prometheus prometheus-node-exporter 2>/dev/null ||
   service prometheus stop 2>/dev/null || true) >/dev/null 2>&1
fi
