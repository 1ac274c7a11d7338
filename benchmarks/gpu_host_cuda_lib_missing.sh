#!/usr/bin/env bash
# One device call on a 1-GPU host: the cuda_lib_missing mutant again, after versions.cuda_libraries reads each
# wheel's RECORD itself (Python 3.12's importlib.metadata leaves deleted files out of Distribution.files, which is
# why the mutant was missed there before). Results into $OUT:
#   bash benchmarks/gpu_host_cuda_lib_missing.sh     (from the project root on the GPU host, .gpu-host/ carried)
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
out=${OUT:?}; t0=$(date +%s)
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$out/run.log"; }
eval "$(bash .gpu-host/start-engine.sh | grep ^export)"; say "engine up"
PYTHONPATH=$PWD:${PYTHONPATH:-} timeout 200 python3 -m imagebuilder --offline build --matrix tests/gpu/matrix.yaml \
  --no-smoke --no-push --report /tmp/ib-clm --quiet > "$out/build.log" 2>&1; say "build exit $?"
image=$(python3 -c "import json; n=json.load(open('/tmp/ib-clm/report.json'))['nodes']; print(next(x['image'] for x in n if x['leaf']))")
timeout 200 python3 benchmarks/mutants.py --kind gpu --image "$image" --out "$out/mutants_gpu_cuda_lib_missing.json" \
  --only cuda_lib_missing,lib_twice 2>&1 | grep -E "caught|MISSED|NOT BUILT|clean" | tee -a "$out/run.log"; say "done"
