#!/usr/bin/env bash
# Serve a real registry (Debian's docker-registry) on 127.0.0.1:${PORT:-5000}. Safe to run twice.
set -euo pipefail
. "$(dirname "$0")/apt.sh"
port=${REGISTRY_PORT:-5000}
url="http://127.0.0.1:$port/v2/"
if curl -fsS "$url" >/dev/null 2>&1; then echo "registry: already serving on 127.0.0.1:$port"; exit 0; fi
if ! command -v docker-registry >/dev/null 2>&1; then
  echo "registry: installing docker-registry"
  apt_install docker-registry
fi
root=${REGISTRY_ROOT:-/var/lib/imagebuilder-registry/$port}
conf=$root/config.yml
mkdir -p "$root/data"
cat >"$conf" <<CONF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $root/data
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
CONF
# Debian's package starts its own service on :5000 under systemd; here we run ours in the background.
(setsid docker-registry serve "$conf" >"$root/registry.log" 2>&1 &)
for _ in $(seq 40); do curl -fsS "$url" >/dev/null 2>&1 && break; sleep 0.25; done
curl -fsS "$url" >/dev/null || { echo "registry: did not come up" >&2; tail -20 "$root/registry.log" >&2; exit 1; }
echo "registry: serving on 127.0.0.1:$port (data in $root/data)"
