"""Kubernetes: a device plugin that offers the GPUs of cuwire servers to pods on GPU-less nodes."""
