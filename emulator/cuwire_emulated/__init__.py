"""The emulated device: a host-memory stand-in for a GPU with the interface of the server's CUDA libraries,
running the bundled test apps' kernels through host implementations registered by name. For tests only
(`cuwire server --emulated`, opened through backend.py); neither the wheel nor the server image has it."""
