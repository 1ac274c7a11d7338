#!/usr/bin/env bash
# Issue 42's GPU evidence on a multi-GPU host (nvidia-h100-x2), one phase per device call, results into $OUT:
#   bash benchmarks/gpu_host_truth.sh noise    # clean leaf verified on every GPU + whole-suite runs: busbw floors, noise
#   bash benchmarks/gpu_host_truth.sh break    # clean leaf again (gated), then hidden GPUs, slow collectives, slower
#                                              # matmul after a pin change (benchmarks/gpu_truth.py says how)
# from the project root on the GPU host, .gpu-host/ carried along (bundle it with:
#   bash ../shared/gpu-host/bundle.sh .gpu-host tenacity cryptography cffi pycparser).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
phase=${1:?noise or break}; out=${OUT:?}; t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$out/run.log"; }
for part in include libexec/gcc; do  # the kit's base has a gcc without headers: torch.compile needs them
  # (links followed: a layer's links may only point inside its folder; a dangling one is left out)
  rm -rf "tests/gpu/layers/gpu-task/usr/$part"  # (a warm machine keeps an earlier call's copy)
  [ -d "/usr/$part" ] && mkdir -p "tests/gpu/layers/gpu-task/usr/$part" \
    && { cp -rL "/usr/$part/." "tests/gpu/layers/gpu-task/usr/$part/" 2>/dev/null || true; }
done
eval "$(bash .gpu-host/start-engine.sh | grep ^export)"; say "engine up"
nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv >> "$out/run.log" 2>&1
nvidia-smi topo -m >> "$out/run.log" 2>&1
left=$(( ${TRUTH_SECONDS:-580} - ($(date +%s) - t0) ))  # TRUTH_SECONDS: the call's limit, less a margin
PYTHONPATH=$PWD:$PYTHONPATH timeout "$left" python3 benchmarks/gpu_truth.py --phase "$phase" --out "$out" \
  --deadline "$((left - 10))" > "$out/truth.log" 2>&1; say "gpu_truth $phase exit $?"; tail -30 "$out/truth.log" >> "$out/run.log"
