#!/usr/bin/env bash
# Download the wheels of the CUDA integration tests (PyPI's torch with its nvidia-* wheels: ~4 GB) into a
# local wheelhouse, so the builds read them over loopback. `make test` starts this in the background first
# thing: the download, which is bound by the network, overlaps the set-up, lint, unit and CPU tests, which
# are bound by the CPU. The CUDA tests wait for DIR/.complete (tests/integration/test_cuda_image.py).
#   .ci/cuda-wheels.sh DIR
set -uo pipefail
dest=${1:?usage: cuda-wheels.sh DIR}
mkdir -p "$dest"
rm -f "$dest/.complete" "$dest/.failed"
echo $$ >"$dest/.pid"  # who is downloading (make and the CUDA tests wait for it rather than start another)
trap 'rm -f "$dest/.pid"' EXIT
ca=/etc/ssl/certs/ca-certificates.crt
pip_download() {  # the host's pip config is ignored: only PyPI, binary wheels, for this Python (3.11, as the images)
  python3 -m pip download --isolated --disable-pip-version-check -q --only-binary=:all: \
    --index-url https://pypi.org/simple ${ca:+--cert "$ca"} --dest "$dest" "$@"
}
start=$(date +%s)
# torch 2.11.0 + cu130 for every CUDA image of the tests (runtime, the NCCL override, devel with its toolkit):
# they share one torch install step, which the engine's build cache then serves.
if pip_download torch==2.11.0 'cuda-toolkit[cccl,crt,nvcc,nvvm]==13.0.2' \
   && pip_download --no-deps nvidia-nccl-cu13==2.29.7; then
  echo "cuda wheels: $(ls "$dest"/*.whl | wc -l) wheels, $(du -sh "$dest" | cut -f1) in $(( $(date +%s) - start )) s"
  touch "$dest/.complete"
else
  echo "cuda wheels: download failed; the CUDA tests take the wheels from PyPI instead" >&2
  touch "$dest/.failed"
  exit 1
fi
