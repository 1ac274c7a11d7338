#!/bin/sh
# Move the image's NVIDIA library wheels (nvidia/ and their dist-info folders) into the shared CUDA prefix.
set -eu
dest=/opt/imagebuilder/cuda
site="$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))')"
mkdir -p "$dest"
mv "$site/nvidia" "$dest/"
for info in "$site"/nvidia_*.dist-info "$site"/cuda_toolkit-*.dist-info; do
  if [ -e "$info" ]; then mv "$info" "$dest/"; fi
done
echo "$dest" > "$site/imagebuilder-cuda.pth"
if [ "${1:-0}" = 1 ]; then  # the host image's system cuDNN and NCCL: second copies beside the wheels'
  rm -fv /usr/lib/x86_64-linux-gnu/libcudnn*.so* /usr/lib/x86_64-linux-gnu/libnccl*.so* | wc -l \
    | sed 's/^/removed system cuDNN and NCCL files: /'
fi
python3 /opt/imagebuilder/cuda_prefix.py seal "$dest"
python3 /opt/imagebuilder/cuda_prefix.py single "$dest"
python3 -c 'import nvidia, torch; print("nvidia from", list(nvidia.__path__), "torch", torch.__version__)'
