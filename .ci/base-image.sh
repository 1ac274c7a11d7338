#!/usr/bin/env bash
# Provide a base image under the name a matrix expects: pull it where a registry is reachable,
# otherwise seed it from Debian's package mirror (debootstrap + docker import).
#   .ci/base-image.sh debian:bookworm [SUITE]
set -euo pipefail
. "$(dirname "$0")/apt.sh"
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
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
command -v debootstrap >/dev/null 2>&1 || {
  apt_install debootstrap
}
dir=$(mktemp -d /var/tmp/imagebuilder-seed.XXXXXX)
trap 'rm -rf "$dir"' EXIT
echo "base image: seeding $name from $mirror ($suite, minbase)"
debootstrap --variant=minbase "$suite" "$dir/root" "$mirror" >"$dir/debootstrap.log" 2>&1 || {
  tail -20 "$dir/debootstrap.log" >&2; exit 1; }
rm -rf "$dir"/root/var/cache/apt/archives/*.deb "$dir"/root/var/lib/apt/lists/* "$dir"/root/var/log/*
printf 'deb %s %s main\ndeb %s %s-updates main\n' "$mirror" "$suite" "$mirror" "$suite" >"$dir/root/etc/apt/sources.list"
tar -C "$dir/root" --numeric-owner -c . | docker import -c 'CMD ["bash"]' -c 'ENV LANG=C.UTF-8' - "$name" >/dev/null
echo "base image: $name seeded ($(docker image inspect -f '{{.Size}}' "$name" | numfmt --to=iec))"
