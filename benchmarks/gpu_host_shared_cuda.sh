#!/usr/bin/env bash
# One device call on a 1-GPU host (issue 18's GPU evidence), results into $OUT as they come:
#   bash benchmarks/gpu_host_shared_cuda.sh     (from the project root on the GPU host, .gpu-host/ carried along)
# 1. benchmarks/gpu_smoke.py on tests/gpu/matrix_shared.yaml: the host's torch with its CUDA libraries moved into
#    the shared prefix (/opt/imagebuilder/cuda, .pth + ld.so.conf.d), the whole suite in the container on the GPU;
# 2. the lib_twice mutant on that image (a second libnccl in site-packages): versions.single_copy must fail;
# 3. with --dedupe instead: tests/gpu/matrix_shared_dedupe.yaml (runtime; the host image's system cuDNN and NCCL
#    deleted), then the lib_twice and cuda_lib_missing mutants on that clean image.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
out=${OUT:?}; work=/tmp/ib-shared; mkdir -p "$work"; t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$out/run.log"; }
rm -rf tests/gpu/layers/gpu-task/usr "$work/smoke"  # a warm machine keeps the last call's copies
cp -L /sbin/ldconfig.real tests/gpu/layers/gpu-shared-cuda/ldconfig 2>/dev/null \
  || cp -L /sbin/ldconfig tests/gpu/layers/gpu-shared-cuda/ldconfig  # the base has no /sbin (the layer says why)
eval "$(bash .gpu-host/start-engine.sh | grep ^export)"; say "engine up"
if [ "${1:-}" = --dedupe ]; then
  timeout 400 python3 benchmarks/gpu_smoke.py --matrix tests/gpu/matrix_shared_dedupe.yaml --out "$work/smoke" \
    --name gpu_smoke_shared_cuda_dedupe_1gpu --host-headers --no-host > "$work/smoke.log" 2>&1
  say "gpu_smoke exit $?"; tail -45 "$work/smoke.log" >> "$out/run.log"
  cp "$work/smoke/gpu_smoke_shared_cuda_dedupe_1gpu.json" "$out/" 2>/dev/null || tail -80 "$work/smoke/build.log" >> "$out/run.log"
  image=$(python3 -c "import json; n=json.load(open('$work/smoke/container/report.json'))['nodes']; print(next(x['image'] for x in n if x['leaf']))")
  timeout 200 python3 benchmarks/mutants.py --kind gpu --image "$image" --out "$out/mutants_gpu_shared_cuda_dedupe.json" \
    --only lib_twice,cuda_lib_missing 2>&1 | grep -E "caught|MISSED|NOT BUILT" | tee -a "$out/run.log"; say "mutants done"
  exit 0
fi
timeout 400 python3 benchmarks/gpu_smoke.py --matrix tests/gpu/matrix_shared.yaml --out "$work/smoke" \
  --name gpu_smoke_shared_cuda_1gpu --host-headers --host-cuda --no-host > "$work/smoke.log" 2>&1
say "gpu_smoke exit $?"; tail -45 "$work/smoke.log" >> "$out/run.log"
cp "$work/smoke/gpu_smoke_shared_cuda_1gpu.json" "$out/" 2>/dev/null || tail -80 "$work/smoke/build.log" >> "$out/run.log"
image=$(python3 -c "import json; n=json.load(open('$work/smoke/container/report.json'))['nodes']; print(next(x['image'] for x in n if x['leaf']))")
timeout 150 python3 benchmarks/mutants.py --kind gpu --image "$image" --out "$out/mutants_gpu_shared_cuda.json" \
  --only lib_twice 2>&1 | grep -E "caught|MISSED|NOT BUILT" | tee -a "$out/run.log"; say "mutants done"
