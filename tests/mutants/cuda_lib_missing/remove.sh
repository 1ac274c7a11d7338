#!/bin/sh
# Mutant `cuda_lib_missing` (CUDA images): one of the wheels' CUDA libraries is gone. Must be caught by
# versions.cuda_libraries. Run in the mutant layer as root, with the image's Python first on PATH. LIB picks it:
#   LIB=libcudnn_engines_precompiled (default): cuDNN's engines, loaded on first use only (import torch and even
#       a small convolution still work): the wheel's RECORD lists the file ("installed by the wheels but
#       missing: nvidia-cudnn-cu12: .../libcudnn_engines_precompiled.so.9"), GPU or not
#   LIB=libnccl: linked by libtorch_cuda - `import torch` itself fails ("import torch failed: ...")
set -eu
lib="${LIB:-libcudnn_engines_precompiled}"
site="$(python -c 'import importlib.util; print(list(importlib.util.find_spec("nvidia").submodule_search_locations)[0])')"
found="$(find "$site" -name "${lib}.so*")"
test -n "$found" || { echo "no ${lib}.so* under $site" >&2; exit 1; }
echo "MUTANT cuda_lib_missing: removing $found"
rm -f $found
