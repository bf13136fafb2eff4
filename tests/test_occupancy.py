"""cuwire/occupancy.py against NVIDIA's occupancy calculator (the toolkit's cuda_occupancy.h, compiled from
tests/occupancy/reference.c): the same answers on thousands of random kernels, launches and GPUs. The model
against the driver itself is tests/gpu_kernel_attributes.py's, on a GPU."""

from __future__ import annotations

import random
import shutil
import subprocess
from pathlib import Path

import pytest

from cuwire import occupancy
from cuwire.occupancy import Device, Function

HEADER = Path("/usr/local/cuda/include/cuda_occupancy.h")
REFERENCE = Path(__file__).parent / "occupancy" / "reference.c"
KIB = 1024
# GPUs as the driver describes them: V100, T4, A100, RTX 3090, L4, H100, B200, RTX 5090
GPUS = [
    Device(7, 0, 1024, 2048, 32, 65536, 65536, 48 * KIB, 96 * KIB, 96 * KIB, 0, 32),
    Device(7, 5, 1024, 1024, 32, 65536, 65536, 48 * KIB, 64 * KIB, 64 * KIB, 0, 16),
    Device(8, 0, 1024, 2048, 32, 65536, 65536, 48 * KIB, 163 * KIB, 164 * KIB, 1 * KIB, 32),
    Device(8, 6, 1024, 1536, 32, 65536, 65536, 48 * KIB, 99 * KIB, 100 * KIB, 1 * KIB, 16),
    Device(8, 9, 1024, 1536, 32, 65536, 65536, 48 * KIB, 99 * KIB, 100 * KIB, 1 * KIB, 24),
    Device(9, 0, 1024, 2048, 32, 65536, 65536, 48 * KIB, 227 * KIB, 228 * KIB, 1 * KIB, 32),
    Device(10, 0, 1024, 2048, 32, 65536, 65536, 48 * KIB, 227 * KIB, 228 * KIB, 1 * KIB, 32),
    Device(12, 0, 1024, 1536, 32, 65536, 65536, 48 * KIB, 99 * KIB, 100 * KIB, 1 * KIB, 24),
]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    if not HEADER.exists() or shutil.which("gcc") is None:
        pytest.skip("needs the CUDA toolkit's cuda_occupancy.h and gcc")
    exe = tmp_path_factory.mktemp("occupancy") / "reference"
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", f"-I{HEADER.parent}", "-o", str(exe), str(REFERENCE)],
                   check=True)
    return exe


def _kernel(rng: random.Random, gpu: Device) -> Function:
    shared = rng.choice([0, 0, rng.randrange(0, 48 * KIB, 4)])
    optin_room = gpu.shared_per_block_optin - shared
    return Function(registers=rng.choice([rng.randrange(0, 64), rng.randrange(0, 256)]), shared=shared,
                    max_threads=rng.choice([1024, 1024, 768, 512, 256, 128]),
                    max_dynamic_shared=rng.choice([max(0, 48 * KIB - shared), rng.randrange(0, max(1, optin_room))]),
                    carveout=rng.choice([-1, -1, -1, 0, 10, 25, 50, 75, 100]), barriers=rng.choice([0, 1, 1, 2, 5, 16]))


def _cases(n: int):
    rng = random.Random(35)
    for _ in range(n):
        gpu = rng.choice(GPUS)
        fn = _kernel(rng, gpu)
        if rng.random() < 0.7:
            block = rng.choice([32, 64, 128, 256, rng.randrange(1, fn.max_threads + 1)])
            yield occupancy.ASK_OCCUPANCY, gpu, fn, block, rng.choice([0, rng.randrange(0, fn.max_dynamic_shared + 1)])
        else:
            yield occupancy.ASK_AVAILABLE_SHARED, gpu, fn, rng.choice([1, 2, 3, 4, 8]), rng.choice([64, 128, 256])


def _line(ask: int, d: Device, f: Function, a: int, b: int) -> str:
    ref_ask = 1 if ask == occupancy.ASK_OCCUPANCY else 3
    return " ".join(str(x) for x in (
        ref_ask, d.major, d.minor, d.max_threads_per_block, d.max_threads_per_sm, d.registers_per_block,
        d.registers_per_sm, d.warp_size, d.shared_per_block, d.shared_per_sm, d.shared_per_block_optin,
        d.reserved_shared_per_block, f.registers, f.max_threads, f.shared, f.max_dynamic_shared, f.barriers,
        f.carveout, a, b))


def test_model_answers_as_nvidia_calculator(reference):
    cases = list(_cases(20000))
    out = subprocess.run([str(reference)], input="\n".join(_line(*c) for c in cases) + "\n", capture_output=True,
                         text=True, check=True).stdout.split()
    assert len(out) == len(cases)
    modelled = differ = 0
    examples = []
    for (ask, d, f, a, b), want in zip(cases, out, strict=True):
        got = occupancy.active_blocks(d, f, a, b) if ask == occupancy.ASK_OCCUPANCY else \
            occupancy.available_dynamic_shared(d, f, a, b)
        if got is None:
            continue  # (the model leaves it to the driver)
        modelled += 1
        if want == "E" or int(want) != got:
            differ += 1
            if len(examples) < 5:
                examples.append((ask, d, f, a, b, want, got))
    assert not examples, f"{differ} of {modelled} differ, e.g. {examples}"
    assert modelled > 0.8 * len(cases), f"the model answered only {modelled} of {len(cases)}"


def test_model_leaves_to_the_driver_what_it_cannot_say():
    h100 = GPUS[5]
    fn = Function(registers=32, shared=0, max_threads=256, max_dynamic_shared=48 * KIB)
    assert occupancy.active_blocks(h100, fn, 512, 0) is None  # larger than the kernel's blocks may be
    assert occupancy.active_blocks(h100, fn, 0, 0) is None
    assert occupancy.active_blocks(h100, fn, 128, 48 * KIB + 1) is None  # more than it was allowed
    pascal = Device(6, 1, 1024, 2048, 32, 65536, 65536, 48 * KIB, 96 * KIB, 48 * KIB, 0, 32)
    assert occupancy.active_blocks(pascal, fn, 128, 0) is None  # (a GPU the model does not know)
    assert occupancy.available_dynamic_shared(h100, fn, 0, 128) is None


def test_answer_only_for_checked_questions(monkeypatch):
    h100 = GPUS[5]
    fn = Function(registers=32, shared=0, max_threads=1024, max_dynamic_shared=48 * KIB)
    monkeypatch.setattr(occupancy, "CHECKED", frozenset())
    assert occupancy.answer(occupancy.ASK_OCCUPANCY, h100, fn, 256, 0, 0) is None
    monkeypatch.setattr(occupancy, "CHECKED", frozenset({occupancy.ASK_OCCUPANCY, occupancy.ASK_OCCUPANCY_FLAGS}))
    assert occupancy.answer(occupancy.ASK_OCCUPANCY, h100, fn, 256, 0, 0) == 8
    assert occupancy.answer(occupancy.ASK_OCCUPANCY_FLAGS, h100, fn, 256, 0, 1) == 8
    assert occupancy.answer(occupancy.ASK_OCCUPANCY_FLAGS, h100, fn, 256, 0, 2) is None  # (a flag CUDA has not)
    assert occupancy.answer(occupancy.ASK_AVAILABLE_SHARED, h100, fn, 2, 256, 0) is None  # not checked
