#!/usr/bin/env bash
# One device call on a 2-GPU host (issue 19, and issue 16's mutants on 2 ranks), results into $OUT as they come:
#   bash benchmarks/gpu_host_2gpu.sh     (run from the project root on the GPU host, .gpu-host/ carried along)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
out=${OUT:?}; work=/tmp/ib-2gpu; mkdir -p "$work"
t0=$(date +%s)
eval "$(bash .gpu-host/start-engine.sh | grep ^export)"
echo "engine up after $(( $(date +%s) - t0 )) s" | tee "$out/run.log"
python3 -m pytest tests/gpu -q -p no:cacheprovider 2>&1 | tail -5 | tee -a "$out/run.log"
timeout 330 python3 benchmarks/gpu_multi.py --out "$work/multi" --name 2gpu 2>&1 | tail -40 >> "$out/run.log"
cp "$work"/multi/gpu_multi_2gpu.json "$work"/multi/smoke/gpu_smoke_2gpu.json "$out/" 2>/dev/null
image=$(python3 -c "import json,sys; n=json.load(open('$work/multi/smoke/container/report.json'))['nodes']; print(next(x['image'] for x in n if x['leaf']))" 2>/dev/null)
echo "clean image: $image after $(( $(date +%s) - t0 )) s" | tee -a "$out/run.log"
[ -n "$image" ] && timeout 200 python3 benchmarks/mutants.py --kind gpu --image "$image" \
  --only grad_zero,grad_half,slow_matmul,compile_noop --out "$out/mutants_gpu_2gpu.json" 2>&1 | tail -12 | tee -a "$out/run.log"
echo "done after $(( $(date +%s) - t0 )) s" | tee -a "$out/run.log"
