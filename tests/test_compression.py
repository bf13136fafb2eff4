"""When a session compresses (cuwire/wire/compression.py), driven with made-up link rates; and a program's copies
through a real session with compression on, both ways, give the same bytes."""

from __future__ import annotations

import os
import re

import pytest
import zstandard
from conftest import APPS, STAT_BYTES, run_remote

from cuwire.wire.compression import AUTO_BACKOFF, AUTO_SLOW, Policy, decompress_into, pays

MB = 1 << 20


def test_off_and_on():
    assert not Policy("off").wants(100 * MB)
    on = Policy("on", minimum=64 << 10)
    assert on.wants(64 << 10) and not on.wants(1000) and on.active()
    assert Policy("zstd").always  # the older name
    assert Policy("on", local=True).active()  # asked for: even on this host
    with pytest.raises(ValueError, match="CUWIRE_COMPRESS"):
        Policy("gzip")


def test_auto_compresses_on_a_slow_link_only():
    p = Policy("auto")
    assert not p.active()  # nothing measured yet
    p.observe(8 * MB, 8 * MB, False, rate=3e9)  # loopback speed
    assert not p.active()
    p.observe(8 * MB, 8 * MB, False, rate=AUTO_SLOW / 4)  # one slow payload (the GPU was busy): not enough
    assert not p.active()
    for _ in range(4):
        p.observe(8 * MB, 8 * MB, False, rate=AUTO_SLOW / 4)
    assert p.active() and p.wants(8 * MB)
    assert not Policy("auto", local=True).active()  # a Unix socket: never, whatever the rate


def test_auto_stops_while_the_data_does_not_compress():
    p = Policy("auto")
    for _ in range(4):
        p.observe(8 * MB, 8 * MB, False, rate=100e6)
    assert p.active()
    p.observe(8 * MB, 4 * MB, True, rate=0)  # halved: worth it
    assert p.active()
    p.observe(8 * MB, int(7.9 * MB), True, rate=0)  # random bytes: not worth it
    assert not p.active()
    for _ in range(AUTO_BACKOFF - 1):
        p.observe(8 * MB, 8 * MB, False, rate=100e6)
        assert not p.active()
    p.observe(8 * MB, 8 * MB, False, rate=100e6)  # the link is measured again: still slow
    assert p.active()


def test_a_payload_is_compressed_only_where_that_pays():
    """Samples of it, compressed and timed, decide: sparse data before a 100 Mbit/s link is worth it, random
    bytes never, and nothing is before a link faster than compression itself. (The links are far from where
    the decision turns, so that a loaded machine's slower compression decides the same: at 1 Gbit/s the
    samples must compress at 250 MB/s, which a busy 2-core CI machine need not reach.)"""
    sparse = bytes(64 << 20)
    assert pays(sparse, 12.5e6)
    assert not pays(os.urandom(4 << 20), 125e6)
    assert not pays(sparse, 1e12)
    assert Policy("on").pays(os.urandom(1 << 20))  # mode on compresses what it is told to


def test_decompress_into_fills_the_buffers_first():
    data = bytes(range(256)) * 4096  # 1 MiB
    frame = zstandard.ZstdCompressor().compress(data)
    first, second = bytearray(1000), bytearray(2000)
    rest, filled = decompress_into(zstandard.ZstdDecompressor(), frame, [first, second], len(data))
    assert filled == 3000 and bytes(first) + bytes(second) + rest == data
    with pytest.raises(ValueError, match="over the limit"):
        decompress_into(zstandard.ZstdDecompressor(), frame, [bytearray(10)], len(data) - 1)
    stream = zstandard.ZstdCompressor(write_content_size=False).compress(data)  # no size in its header
    with pytest.raises(ValueError, match="more than the limit"):
        decompress_into(zstandard.ZstdDecompressor(), stream, [], 4096)


@pytest.mark.parametrize("mode, transport", [("on", "tcp"), ("auto", "tcp"), ("on", "unix")])
def test_copies_with_compression_give_the_same_bytes(mode, transport, apps, client_lib, server):
    r = run_remote(apps / "large_copies", client_lib, server.address,
                   env={"CUWIRE_COMPRESS": mode, "CUWIRE_TRANSPORT": transport, "CUWIRE_STATS": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout == (APPS / "expected" / "large_copies.out").read_text()
    sent = [int(x) for x in re.findall(rf"bytes sent: {STAT_BYTES} in messages, carrying {STAT_BYTES}", r.stderr)[0]]
    if mode == "on" and transport == "tcp":  # large_copies' data compresses: far fewer bytes on the wire
        assert sent[0] < sent[1] / 2, r.stderr
    # (auto decides by the link's measured rate, which a loaded machine's loopback does not promise; the
    # decision itself is tested above, and on a slowed link by bench/slow_link.sh)


def netns_possible() -> bool:
    import shutil
    import subprocess

    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tc") or not shutil.which("nvcc"):
        return False
    name = f"cwprobe{os.getpid()}"
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode != 0:
        return False
    veth = f"cwp{os.getpid()}"
    try:  # a veth pair can be made there, and a link slowed (the kernel's tbf queueing discipline)
        steps = [["ip", "-n", name, "link", "add", veth + "a", "type", "veth", "peer", "name", veth + "b"],
                 ["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", veth + "a", "root", "tbf", "rate", "1gbit",
                  "burst", "32kb", "latency", "10ms"]]
        return all(subprocess.run(step, capture_output=True).returncode == 0 for step in steps)
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.mark.skipif(not netns_possible(), reason="needs root, iproute2 and tc to make network namespaces")
def test_auto_compresses_on_a_slowed_link():
    """bench/slow_link.sh: a 100 Mbit/s link between two network namespaces. Uncompressed, every byte crosses
    it; with auto, the client measures the link slow after its first large copy and from then on data that
    compresses crosses it compressed (counted in bytes, not timed)."""
    import subprocess

    from conftest import ROOT

    r = subprocess.run(["bash", str(ROOT / "bench" / "slow_link.sh"), "100mbit", "8"], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "RAW": "0"})
    assert r.returncode == 0, r.stdout + r.stderr

    def moved(mode: str) -> tuple[int, int]:
        err = (ROOT / "build" / "slow_link" / f"{mode}.err").read_text()
        print(f"CUWIRE_COMPRESS={mode}:", err)  # shown when an assertion fails
        out, raw_out, back, raw_back = map(int, re.search(
            rf"bytes sent: {STAT_BYTES} in messages, carrying {STAT_BYTES} of call data before compression; received: "
            rf"{STAT_BYTES} in messages, {STAT_BYTES}", err).groups())
        return out + back, raw_out + raw_back

    wire, raw = moved("off")
    assert wire >= raw
    wire, raw = moved("on")
    assert wire < 0.8 * raw  # half of the data is mostly zeros
    wire, raw = moved("auto")
    assert wire < 0.9 * raw, r.stdout  # the first copy goes as it is (it times the link), later ones not
