#!/usr/bin/env bash
# Fill a wheelhouse with torch's CPU wheel for the demo and the integration tests (offline find-links).
#   .ci/wheelhouse.sh DIR [TORCH_VERSION]
set -euo pipefail
dest=${1:?usage: wheelhouse.sh DIR [VERSION]}
version=${2:-2.13.0}
mkdir -p "$dest"
if ls "$dest"/torch-"$version"+cpu-*.whl >/dev/null 2>&1; then echo "wheelhouse: torch $version+cpu present"; exit 0; fi
python3 -m pip download -q --no-deps --only-binary=:all: --dest "$dest" "torch==$version+cpu" 2>/dev/null \
  || python3 -m pip download -q --no-deps --only-binary=:all: --dest "$dest" "torch==$version"
ls "$dest"/torch-"$version"*.whl
