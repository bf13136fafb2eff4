"""How many blocks of a kernel an SM holds at once, reckoned on the client (issue 35: PyTorch, cuBLAS and cuDNN
ask cuOccupancyMaxActiveBlocksPerMultiprocessor(WithFlags) and cuOccupancyAvailableDynamicSMemPerBlock of a
kernel before its first launch; a program's first run asked the server each one).

The reckoning is NVIDIA's documented occupancy calculator (the toolkit's cuda_occupancy.h, which the runtime's
occupancy API follows): a block takes warps, registers (per warp, in units, per scheduler), shared memory
(with the part the driver reserves, in units, against the SM's carveout) and barriers; an SM holds as many
blocks as the scarcest of these allows, and no more than its block limit. Written here from that description
for GPUs of compute capability 7.0 to 12.x; tests/test_occupancy.py compares it with the header on many
inputs, and tests/gpu_kernel_attributes.py with the driver, kernel by kernel. `CHECKED` names the questions
whose answers matched the driver's there: only those does a client answer itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from cuwire.generated import cuda_constants as cu
from cuwire.wire import layouts

# the questions, as answers_cache.c and a run's list number them (cuwire/wire/frames.h)
ASK_OCCUPANCY, ASK_OCCUPANCY_FLAGS, ASK_AVAILABLE_SHARED = (
    layouts.constant(n) for n in ("CW_ASK_OCCUPANCY", "CW_ASK_OCCUPANCY_FLAGS", "CW_ASK_AVAILABLE_SHARED"))
REGISTER_UNIT = 256  # registers go to a warp in units of this many
SHARED_UNIT = 128  # shared memory goes to a block in units of this many bytes (compute capability 8 on)
SHARED_UNIT_VOLTA = 256  # ...and of 7.x
SUB_PARTITIONS = 4  # the warp schedulers an SM's register file is split among
MOST_REGISTERS = 256  # a thread's
CARVEOUT_DEFAULT = -1  # CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT not set
KIB = 1024
# The shared memory sizes an SM may be configured with (KiB), by compute capability: a carveout is rounded up to
# the next of these
_CARVEOUTS = {
    (7, 0): (0, 8, 16, 32, 64, 96), (7, 2): (0, 8, 16, 32, 64, 96), (7, 5): (32, 64),
    (8, 0): (0, 8, 16, 32, 64, 100, 132, 164), (8, 7): (0, 8, 16, 32, 64, 100, 132, 164),
    (8, 6): (0, 8, 16, 32, 64, 100), (8, 9): (0, 8, 16, 32, 64, 100),
    **{(9, m): (0, 8, 16, 32, 64, 100, 132, 164, 196, 228) for m in range(10)},
    **{(10, m): (0, 8, 16, 32, 64, 100, 132, 164, 196, 228) for m in (0, 1, 3)},
    **{(11, m): (0, 8, 16, 32, 64, 100, 132, 164, 196, 228) for m in (0, 1, 3)},
    **{(12, m): (0, 8, 16, 32, 64, 100) for m in (0, 1)},
}
_TURING = (7, 5)


@dataclass(frozen=True)
class Device:
    """What of a GPU occupancy depends on (its CUdevice attributes, from the device snapshot)."""

    major: int
    minor: int
    max_threads_per_block: int
    max_threads_per_sm: int
    warp_size: int
    registers_per_block: int
    registers_per_sm: int
    shared_per_block: int  # without opting in (48 KiB)
    shared_per_block_optin: int
    shared_per_sm: int
    reserved_shared_per_block: int
    max_blocks_per_sm: int

    @classmethod
    def from_attributes(cls, a) -> Device | None:
        """From a device's attribute values, indexed by CUdevice_attribute (Device_pb.attributes); None where
        some are missing."""
        names = ("COMPUTE_CAPABILITY_MAJOR", "COMPUTE_CAPABILITY_MINOR", "MAX_THREADS_PER_BLOCK",
                 "MAX_THREADS_PER_MULTIPROCESSOR", "WARP_SIZE", "MAX_REGISTERS_PER_BLOCK",
                 "MAX_REGISTERS_PER_MULTIPROCESSOR", "MAX_SHARED_MEMORY_PER_BLOCK",
                 "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
                 "RESERVED_SHARED_MEMORY_PER_BLOCK", "MAX_BLOCKS_PER_MULTIPROCESSOR")
        numbers = [getattr(cu, f"CU_DEVICE_ATTRIBUTE_{n}") for n in names]
        if len(a) <= max(numbers):
            return None
        return cls(*(int(a[n]) for n in numbers))


@dataclass(frozen=True)
class Function:
    """What of a kernel occupancy depends on: its attributes as the driver gives them now (after the program's
    sets), and its barriers (kernel_facts.KernelFacts.barriers)."""

    registers: int  # NUM_REGS
    shared: int  # SHARED_SIZE_BYTES: static
    max_threads: int  # MAX_THREADS_PER_BLOCK
    max_dynamic_shared: int  # MAX_DYNAMIC_SHARED_SIZE_BYTES
    carveout: int = CARVEOUT_DEFAULT  # PREFERRED_SHARED_MEMORY_CARVEOUT: percent of the most, or -1
    barriers: int = 1


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def _configured(device: Device, size: int) -> int | None:
    """The smallest shared memory configuration of an SM that holds `size` bytes; None where none does."""
    for kib in _CARVEOUTS[(device.major, device.minor)]:
        if size <= kib * KIB:
            return kib * KIB
    return None


def _preferred_shared(device: Device, fn: Function) -> int | None:
    """The SM's shared memory as the kernel's carveout asks (the most where it asks none)."""
    if fn.carveout == CARVEOUT_DEFAULT:
        return _configured(device, device.shared_per_sm)
    if not 0 <= fn.carveout <= 100:
        return None
    return _configured(device, fn.carveout * device.shared_per_sm // 100)


def _per_block_limit(device: Device, whole: int) -> int:
    """The most shared memory a block of `whole` bytes (static, reserved and the kernel's largest dynamic)
    may have: the opt-in limit where it needs it."""
    limit = device.shared_per_block_optin if whole > device.shared_per_block else device.shared_per_block
    return limit + (device.reserved_shared_per_block if device.major >= 8 else 0)


def _barrier_slots(device: Device) -> int:
    """Barriers an SM has, as a multiple of its block limit."""
    one_each = {(8, 6), (8, 7), (8, 9), (10, 1), (11, 0)} | {(12, m) for m in range(10)}
    return 1 if (device.major, device.minor) in one_each else 2


def known(device: Device) -> bool:
    """Whether the model knows the GPU's compute capability."""
    return (device.major, device.minor) in _CARVEOUTS


def active_blocks(device: Device, fn: Function, block_size: int, dynamic_shared: int) -> int | None:
    """cuOccupancyMaxActiveBlocksPerMultiprocessor: blocks of `block_size` threads with `dynamic_shared`
    bytes of dynamic shared memory an SM holds at once; None where the model does not say (an unknown GPU, a
    block the kernel cannot run, more dynamic shared memory than it was allowed: the driver's to answer)."""
    if not known(device) or block_size <= 0 or block_size > min(fn.max_threads, device.max_threads_per_block):
        return None
    if dynamic_shared < 0 or dynamic_shared > fn.max_dynamic_shared or fn.registers > MOST_REGISTERS:
        return None
    warps = -(-block_size // device.warp_size)
    by_warps = device.max_threads_per_sm // device.warp_size // warps
    # registers: a warp's in units; the block's counted over all schedulers as the hardware checks it
    per_warp = _round_up(fn.registers * device.warp_size, REGISTER_UNIT)
    if per_warp:
        if per_warp * _round_up(warps, SUB_PARTITIONS) > device.registers_per_block:
            return 0
        by_registers = device.registers_per_sm // SUB_PARTITIONS // per_warp * SUB_PARTITIONS // warps
    else:
        by_registers = device.max_blocks_per_sm
    # shared memory: static, reserved and dynamic, in units, against the SM's configured size
    unit = SHARED_UNIT_VOLTA if device.major == 7 else SHARED_UNIT
    static = fn.shared + device.reserved_shared_per_block
    block = _round_up(static + dynamic_shared, unit)
    if block > _per_block_limit(device, static + fn.max_dynamic_shared):
        return 0
    preferred = _preferred_shared(device, fn)
    if preferred is None:
        return None
    if preferred < block:  # (a carveout smaller than one block gives way to the block's)
        preferred = _configured(device, block)
        if preferred is None:
            return None
    by_shared = preferred // block if block else device.max_blocks_per_sm
    blocks = min(by_warps, by_registers, by_shared, device.max_blocks_per_sm)
    if device.major >= 9 and fn.barriers > 0:
        blocks = min(blocks, device.max_blocks_per_sm * _barrier_slots(device) // fn.barriers)
    return blocks


def available_dynamic_shared(device: Device, fn: Function, blocks: int, block_size: int) -> int | None:
    """cuOccupancyAvailableDynamicSMemPerBlock: the most dynamic shared memory a block of `block_size`
    threads may take so that `blocks` of them fit an SM; None where the model does not say (blocks that do not
    fit however little they take: the driver's error to give)."""
    fit = active_blocks(device, fn, block_size, 0)
    if fit is None or blocks <= 0 or fit < blocks:
        return None
    limit = _per_block_limit(device, device.shared_per_sm)
    if blocks == 1:
        per_sm = limit
    else:
        per_sm = _preferred_shared(device, fn)
        if not per_sm:
            per_sm = _configured(device, 1)
        if per_sm is None:
            return None
    unit = SHARED_UNIT_VOLTA if device.major == 7 else SHARED_UNIT
    room = min(per_sm // blocks // unit * unit, limit) - fn.shared
    if room < 0:
        return None
    return min(room, fn.max_dynamic_shared)


def answer(ask: int, device: Device, fn: Function, a: int, b: int, c: int) -> int | None:
    """A question as answers_cache.c keys it (frames.h CW_ASK_*: the block size, the dynamic shared memory
    and the flags of an occupancy question; the blocks and the block size of the shared memory available),
    answered by the model where CHECKED says it may be; else None."""
    if ask not in CHECKED:
        return None
    if ask == ASK_OCCUPANCY or (ask == ASK_OCCUPANCY_FLAGS and c in (0, cu.CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)):
        return active_blocks(device, fn, a, b)  # (the flag matters to GPUs before 7.0 only)
    if ask == ASK_AVAILABLE_SHARED:
        return available_dynamic_shared(device, fn, a, b)
    return None


# The questions whose model matched the driver's answers for every kernel and configuration
# tests/gpu_kernel_attributes.py tried on a GPU (an H200, 2026-11-28: 58,681 kernels of PyTorch's, NVIDIA's
# libraries' and the test apps' images, 18 launches each and, of every eighth, again after three sets of
# shared memory and carveout: 956,796 answers of each occupancy question and 976,820 of the shared memory
# available, none different); a client asks the server the others.
CHECKED: frozenset[int] = frozenset({ASK_OCCUPANCY, ASK_OCCUPANCY_FLAGS, ASK_AVAILABLE_SHARED})
