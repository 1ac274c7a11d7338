"""imagebuilder: layered PyTorch/CUDA images from a version matrix, GPU-gated before they are pushed."""

__version__ = "0.1.0"
