#!/usr/bin/env bash
# The second 1-GPU device call (issues 16 and 17), results into $OUT as they come:
# the GPU mutants the first call had no time for (slow_matmul first), GPU-runner minutes.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
out=${OUT:?}; work=/tmp/ib-1gpu; mkdir -p "$work"; t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$out/run.log"; }
eval "$(bash .gpu-host/start-engine.sh | grep ^export)"; say "engine up"
timeout 300 python3 benchmarks/gpu_minutes.py --out "$out/gpu_minutes_gpu.json" > "$work/minutes.log" 2>&1
say "gpu_minutes exit $?"; tail -25 "$work/minutes.log" >> "$out/run.log"
image=$(python3 -c "import json; n=json.load(open('/tmp/ib-gpu-minutes/report.json'))['nodes']; print(next(x['image'] for x in n if x['leaf']))")
timeout 190 python3 benchmarks/mutants.py --kind gpu --no-clean --image "$image" --out "$out/mutants_gpu_1gpu_b.json" \
  --only slow_matmul,compile_noop,torch_version,cuda_lib_missing,nccl_shadow,root_user,shm_small,failing_layer_check,hang,torch_shadow,dynamo_disabled \
  2>&1 | grep -E "caught|MISSED|NOT BUILT" | tee -a "$out/run.log"; say "mutants done"
