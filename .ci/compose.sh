#!/usr/bin/env bash
# A compose command for the tests' registry services (tests/registry/compose.yaml, started by pytest-docker):
# `docker compose` where the client has the plugin, else Debian's docker-compose. Safe to run twice.
set -euo pipefail
. "$(dirname "$0")/apt.sh"
if docker compose version >/dev/null 2>&1; then echo "compose: $(docker compose version --short) (docker compose)"; exit 0; fi
if ! command -v docker-compose >/dev/null 2>&1; then
  echo "compose: installing Debian's docker-compose"
  apt_install docker-compose
fi
echo "compose: $(docker-compose version --short) (docker-compose)"
