#!/usr/bin/env bash
# One device call on a 1-GPU host (issue 16's GPU evidence), results into $OUT as they come:
#   bash benchmarks/gpu_host_1gpu.sh     (run from the project root on the GPU host, .gpu-host/ carried along)
# 1. benchmarks/gpu_smoke.py: tests/gpu/matrix.yaml built, the whole suite in the container (no host run);
# 2. a scripted wrong expectation: `imagebuilder smoke IMAGE --expect torch=<another>` must exit 1 on versions.torch;
# 3. benchmarks/mutants.py --kind gpu on the built image (the gradient and slow-matmul mutants first);
# 4. benchmarks/fsdp_noise.py: the clean bf16 gap over seeds against the gradient mutants' gaps.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
out=${OUT:?}; work=/tmp/ib-1gpu; mkdir -p "$work"; t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$out/run.log"; }
eval "$(bash .gpu-host/start-engine.sh | grep ^export)"; say "engine up"
timeout 200 python3 benchmarks/gpu_smoke.py --out "$work/smoke" --name gpu_smoke_1gpu --host-headers --host-cuda \
  --no-host > "$work/smoke.log" 2>&1; say "gpu_smoke exit $?"; tail -45 "$work/smoke.log" >> "$out/run.log"
cp "$work/smoke/gpu_smoke_1gpu.json" "$out/" 2>/dev/null
image=$(python3 -c "import json; n=json.load(open('$work/smoke/container/report.json'))['nodes']; print(next(x['image'] for x in n if x['leaf']))")
PYTHONPATH=$PWD:$PYTHONPATH timeout 60 python3 -m imagebuilder smoke "$image" --only versions --expect torch=2.11.1 \
  > "$out/wrong_expectation.json" 2> "$work/wrong.err"; say "wrong expectation exit $? ($(tail -1 "$work/wrong.err"))"
timeout 220 python3 benchmarks/mutants.py --kind gpu --image "$image" --out "$out/mutants_gpu_1gpu.json" \
  --only grad_zero,slow_matmul,compile_noop,torch_version,cuda_lib_missing,nccl_shadow,root_user,shm_small,failing_layer_check,hang,grad_half,torch_shadow,dynamo_disabled \
  2>&1 | grep -E "caught|MISSED|NOT BUILT" | tee -a "$out/run.log"; say "mutants done"
timeout 80 python3 benchmarks/fsdp_noise.py --seeds 2 --out "$out/fsdp_noise_nccl_cuda.json" > "$work/noise.log" 2>&1
say "fsdp_noise exit $?"; tail -5 "$work/noise.log" >> "$out/run.log"
