#!/usr/bin/env bash
# Make sure a Docker engine answers: install Debian's docker.io if needed and start dockerd in the
# background (overlay2). Safe to run twice; does nothing when an engine already answers.
set -euo pipefail
. "$(dirname "$0")/apt.sh"
if docker info >/dev/null 2>&1; then echo "engine: already running"; exit 0; fi
if ! command -v dockerd >/dev/null 2>&1; then
  echo "engine: installing docker.io"
  apt_install docker.io
fi
log=${IMAGEBUILDER_DOCKERD_LOG:-/var/log/imagebuilder-dockerd.log}
echo "engine: starting dockerd (log: $log)"
(setsid dockerd --storage-driver=overlay2 >"$log" 2>&1 &)
for _ in $(seq 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
docker info >/dev/null 2>&1 || { echo "engine: dockerd did not come up" >&2; tail -20 "$log" >&2; exit 1; }
echo "engine: $(docker version --format '{{.Server.Version}}') ($(docker info --format '{{.Driver}}'))"
