#!/usr/bin/env bash
# Provide a base image under the name a matrix expects: pull it where a registry is reachable,
# otherwise seed it from Debian's package mirror (debootstrap + docker import).
#   .ci/base-image.sh debian:bookworm [SUITE]
set -euo pipefail
name=${1:?usage: base-image.sh NAME:TAG [SUITE]}
if docker image inspect "$name" >/dev/null 2>&1; then echo "base image: $name present"; exit 0; fi
if timeout 60 docker pull "$name" >/dev/null 2>&1; then echo "base image: pulled $name"; exit 0; fi
tag=${name##*:}
suite=${2:-}
if [ -z "$suite" ]; then
  case "$tag" in
    bookworm*|12*) suite=bookworm ;;
    trixie*|13*) suite=trixie ;;
    *) echo "base image: cannot pull $name and do not know which Debian suite to seed it from" >&2; exit 1 ;;
  esac
fi
root=$(bash "$(dirname "$0")/seed.sh" "$suite")  # (or waits for the one `make test` started, or takes what it left)
echo "base image: importing $name ($suite, minbase)"
docker import -c 'CMD ["bash"]' -c 'ENV LANG=C.UTF-8' "$root" "$name" >/dev/null
echo "base image: $name seeded ($(docker image inspect -f '{{.Size}}' "$name" | numfmt --to=iec))"
