"""cuwire/client/device_choice.py: a program's CUDA_VISIBLE_DEVICES over a device list, as the driver reads it
over one machine's GPUs."""

from __future__ import annotations

import pytest
from conftest import ServerProcess

from cuwire.client.device_choice import ChoiceError, choose
from cuwire.wire.hello import make_hello
from cuwire.wire.transport import open_session

A, B = ["GPU-aa01", "GPU-aa02"], ["GPU-bb01", "GPU-bb02"]


@pytest.mark.parametrize("value, want", [
    ("0", [(0, ["GPU-aa01"])]),
    ("1,2", [(0, ["GPU-aa02"]), (1, ["GPU-bb01"])]),
    ("2", [(1, ["GPU-bb01"])]),
    ("3,2", [(1, ["GPU-bb02", "GPU-bb01"])]),  # (a server's own order, as the program asks it)
    ("2,0", [(1, ["GPU-bb01"]), (0, ["GPU-aa01"])]),  # (the servers in the order of their first GPU)
    ("GPU-bb02,0", [(1, ["GPU-bb02"]), (0, ["GPU-aa01"])]),
    ("GPU-bb0", []),  # (the start of two UUIDs names no one GPU: the list ends there)
    ("0,4,1", [(0, ["GPU-aa01"])]),  # (the list ends at the first entry that names no GPU)
    ("0,0,1", [(0, ["GPU-aa01"])]),  # (...or one named already)
    ("0,-1,1", [(0, ["GPU-aa01"])]),
    ("", []),
    (" 1 , 0 ", [(0, ["GPU-aa02", "GPU-aa01"])]),
])
def test_the_variable_picks_over_the_joined_list(value, want):
    assert choose(value, [A, B]) == want


def test_one_servers_gpus_apart_from_one_another_are_refused_by_name():
    with pytest.raises(ChoiceError, match="server 1 of the device list apart from one another"):
        choose("0,2,1", [A, B])


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_a_check_of_the_hello_answers_the_servers_gpus(isolation, tmp_path):
    """What a device list's client chooses by: a check of the hello (no session) answers the UUIDs of the GPUs
    the server exposes, from the listener's probe or from the devices of a server whose sessions are threads."""
    server = ServerProcess(tmp_path, "--isolation", isolation)
    try:
        transport, reply = open_session(server.address, make_hello("", check=True), mode="tcp")
        transport.close()
    finally:
        server.stop()
    assert not reply.error and len(reply.devices) == 1 and reply.devices[0].startswith("GPU-"), reply
