#!/usr/bin/env bash
# Debian's root file system for a suite (debootstrap, minbase), as a tarball for .ci/base-image.sh to import where
# no registry answers. `make test` starts it in the background first thing: it waits on Debian's mirror, not on the
# venv that `base-image` needs to read the matrix. One seeder per suite at a time (a lock): base-image.sh calls it
# too, and then waits for the one running, or takes the tarball it left (made within the day), or seeds itself.
#   .ci/seed.sh SUITE    ->  prints the tarball's path (/var/tmp/imagebuilder-seed/SUITE.tar); its news on stderr
set -euo pipefail
. "$(dirname "$0")/apt.sh"
suite=${1:?usage: seed.sh SUITE}
dir=/var/tmp/imagebuilder-seed
tar=$dir/$suite.tar
mkdir -p "$dir"
exec 9>"$dir/$suite.lock"
flock 9
if [ -n "$(find "$tar" -mmin -1440 2>/dev/null)" ]; then echo "seed: $suite present ($tar)" >&2; echo "$tar"; exit 0; fi
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
work=$(mktemp -d "$dir/$suite.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "seed: $suite from $mirror (minbase)" >&2
debootstrap --variant=minbase "$suite" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  tail -20 "$work/debootstrap.log" >&2; exit 1; }
rm -rf "$work"/root/var/cache/apt/archives/*.deb "$work"/root/var/lib/apt/lists/* "$work"/root/var/log/*
printf 'deb %s %s main\ndeb %s %s-updates main\n' "$mirror" "$suite" "$mirror" "$suite" >"$work/root/etc/apt/sources.list"
tar -C "$work/root" --numeric-owner -cf "$tar.tmp" . && mv "$tar.tmp" "$tar"
echo "seed: $suite ready ($tar)" >&2
echo "$tar"
