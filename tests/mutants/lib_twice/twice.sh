#!/bin/sh
# Mutant `lib_twice`: a second copy of a shared library the image already has, where pip would put one (a
# package's lib/ folder in the venv's site-packages). Must be caught by versions.single_copy. Run in the mutant
# layer as root, with the image's Python first on PATH. The library: NCCL in a CUDA image (what a pip install
# of nvidia-nccl into the venv, over the shared CUDA node, leaves), else torch's libc10.so (a second torch).
set -eu
site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
lib="$(python -c 'import glob, sys; print(next(iter(sorted(p for d in sys.path for p in glob.glob(d + "/nvidia/**/libnccl.so.2*", recursive=True))), ""))')"
test -n "$lib" || lib="$(python -c 'import importlib.util, os; print(os.path.dirname(importlib.util.find_spec("torch").origin))')/lib/libc10.so"
mkdir -p "$site/mutant_copy/lib"
cp -L "$lib" "$site/mutant_copy/lib/"
echo "MUTANT lib_twice: a second copy of $lib in $site/mutant_copy/lib"
