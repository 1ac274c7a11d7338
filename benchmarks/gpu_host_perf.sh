#!/usr/bin/env bash
# Issue 29's GPU evidence on a 1-GPU host, in as many device calls as it takes (each resumes where the last one
# stopped, on a host kept warm between them; results into $OUT as they come):
#   bash benchmarks/gpu_host_perf.sh
# from the project root on the GPU host, .gpu-host/ carried along (bundle it with:
#   bash ../shared/gpu-host/bundle.sh .gpu-host tenacity cryptography cffi pycparser).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
out=${OUT:?}; t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$out/run.log"; }
for part in include libexec/gcc; do  # the kit's base has a gcc without headers: torch.compile needs them
  [ -d "/usr/$part" ] && mkdir -p "tests/gpu/layers/gpu-task/usr/$part" && cp -a "/usr/$part/." "tests/gpu/layers/gpu-task/usr/$part/"
done
eval "$(bash .gpu-host/start-engine.sh | grep ^export)"; say "engine up"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv >> "$out/run.log" 2>&1
left=$(( 575 - ($(date +%s) - t0) ))
PYTHONPATH=$PWD:$PYTHONPATH timeout "$left" python3 benchmarks/gpu_perf.py --out "$out" --deadline "$((left - 15))" \
  > "$out/perf.log" 2>&1; say "gpu_perf exit $?"; tail -30 "$out/perf.log" >> "$out/run.log"
