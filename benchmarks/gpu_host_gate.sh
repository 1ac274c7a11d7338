#!/usr/bin/env bash
# One device call on a 1-GPU host (issue 27's GPU evidence), results into $OUT as they come:
#   bash benchmarks/gpu_host_gate.sh     (from the project root on the GPU host, .gpu-host/ carried along; bundle it
#                                         with: bash ../shared/gpu-host/bundle.sh .gpu-host tenacity cryptography
#                                         cffi pycparser)
# stage -> verify -> publish of tests/gpu/matrix_gate.yaml with signed pass records (benchmarks/gpu_gate.py), plus a
# record forged with push rights, which publish must refuse.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
out=${OUT:?}; t0=$(date +%s); rm -rf /tmp/ib-gate  # a warm machine keeps the last call's keys and cache folders
say() { echo "[$(( $(date +%s) - t0 )) s] $*" | tee -a "$out/run.log"; }
for part in include libexec/gcc; do  # the kit's base has a gcc without headers: torch.compile needs them
  [ -d "/usr/$part" ] && mkdir -p "tests/gpu/layers/gpu-task/usr/$part" && cp -a "/usr/$part/." "tests/gpu/layers/gpu-task/usr/$part/"
done
eval "$(bash .gpu-host/start-engine.sh | grep ^export)"; say "engine up"
PYTHONPATH=$PWD:$PYTHONPATH timeout 520 python3 benchmarks/gpu_gate.py --out "$out" --name gpu_gate_1gpu \
  > "$out/gate.log" 2>&1; say "gpu_gate exit $?"; tail -40 "$out/gate.log" >> "$out/run.log"
