"""How a call from the wire ends when it cannot run as sent (shared by the session and the handlers)."""

from __future__ import annotations

from cuwire.generated import cuda_constants as cu

INVALID_VALUE, OUT_OF_MEMORY, UNKNOWN = cu.CUDA_ERROR_INVALID_VALUE, cu.CUDA_ERROR_OUT_OF_MEMORY, cu.CUDA_ERROR_UNKNOWN
INVALID_HANDLE, NOT_SUPPORTED, NOT_PERMITTED = (cu.CUDA_ERROR_INVALID_HANDLE, cu.CUDA_ERROR_NOT_SUPPORTED,
                                                cu.CUDA_ERROR_NOT_PERMITTED)


class WireError(Exception):
    """The client sent something malformed: the call is refused with a message, the session goes on."""


class CudaFail(Exception):
    """A value the session did not hand out (a handle, a device range): the call returns this CUDA error
    without reaching CUDA, which could otherwise crash the server on a pointer it does not own."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
