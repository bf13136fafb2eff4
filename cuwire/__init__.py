"""cuwire: CUDA remoting."""

__version__ = "0.1.0"

