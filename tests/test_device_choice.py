"""cuwire/client/device_choice.py: a program's CUDA_VISIBLE_DEVICES over a device list, as the driver reads it
over one machine's GPUs."""

from __future__ import annotations

import pytest

from cuwire.client.device_choice import ChoiceError, choose

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
