#!/bin/sh
# Mutant `lib_shadow`: a library from outside the wheels shadows the wheels' own. Must be caught by
# versions.library_path, which names the foreign path. Run in the mutant layer as root (the image's Python first on
# PATH), then set the ENV line this script prints (or the one from the README). Modes:
#   nccl-preload  (CPU chain)  a stub libnccl.so.2 built with cc, LD_PRELOAD'ed: a CUDA library in a CPU image
#   torch-path    (CPU chain)  a copy of torch's own libc10.so in /opt/shadow, first on LD_LIBRARY_PATH
#   nccl-wheel    (CUDA image) another NCCL (NCCL_WHEEL: a nvidia-nccl-cu12/cu13 wheel of another version)
#                              unpacked into /opt/shadow and LD_PRELOAD'ed. (First on LD_LIBRARY_PATH it is not even
#                              loaded: torch 2.11's wheels load the wheel's libnccl by its path; seen on an H100,
#                              benchmarks/results/gpu_probes_h100.md. LD_PRELOAD maps it beside the wheel's.)
set -eu
mode="${1:-nccl-preload}"
mkdir -p /opt/shadow
case "$mode" in
  nccl-preload)
    printf 'int ncclGetVersion(int *v) { *v = 22000; return 0; }\n' | cc -shared -fPIC -x c -o /opt/shadow/libnccl.so.2 -
    echo "ENV LD_PRELOAD=/opt/shadow/libnccl.so.2" ;;
  torch-path)
    lib="$(python -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("torch").origin))')/lib"
    cp "$lib/libc10.so" /opt/shadow/
    echo "ENV LD_LIBRARY_PATH=/opt/shadow" ;;
  nccl-wheel)
    python -m zipfile -e "${NCCL_WHEEL:?a nvidia-nccl wheel of another version}" /tmp/nccl-wheel
    cp /tmp/nccl-wheel/nvidia/nccl/lib/libnccl.so.2 /opt/shadow/ 2>/dev/null \
      || cp /tmp/nccl-wheel/nvidia/cu13/lib/libnccl.so.2 /opt/shadow/
    rm -rf /tmp/nccl-wheel
    echo "ENV LD_PRELOAD=/opt/shadow/libnccl.so.2" ;;
  *) echo "unknown mode $mode" >&2; exit 2 ;;
esac
chmod -R a+rX /opt/shadow
