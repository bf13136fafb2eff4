"""A program's CUDA_VISIBLE_DEVICES, honoured by its session as the driver honours it: the program sees the
server's devices it names, in that order (server/visible_devices.py); one that names none gets the
driver's CUDA_ERROR_NO_DEVICE and a line saying why."""

from __future__ import annotations

import pytest
from conftest import APPS_BUILD, ServerProcess, run_remote

from cuwire.server.visible_devices import session_devices, shared_process_allows


@pytest.mark.parametrize("exposed,asked,chosen", [
    (None, "1", "1"), (None, "0,2", "0,2"), (None, " 1 , 0", "1,0"), (None, "GPU-ab12,1", "GPU-ab12,1"),
    ("2,3", "1", "3"), ("2,3", "1,0", "3,2"),  # an index counts among the server's own
    ("2,3", "2", ""), ("2,3", "0,5,1", "2"),  # ...and the list ends where an entry names no device
    (None, "", ""), (None, "-1", ""), (None, "0,-1,1", "0"), (None, "0,x,1", "0"),
    ("2,3", "GPU-ab12", ""), ("GPU-ab12,3", "GPU-ab12", "GPU-ab12"),  # by a name the server exposes (or any)
])
def test_the_programs_value_in_the_servers_terms(exposed, asked, chosen):
    assert session_devices(exposed, asked) == chosen


def test_a_uuid_names_a_device_the_server_exposes_by_number():
    """A device list's client names the GPUs it chose by UUID (the check hello's answer), where the server
    was given numbers (`--devices 1`): the UUID of a device it exposes counts, another's does not."""
    assert session_devices("1", "GPU-b", ["GPU-b"]) == "1"
    assert session_devices("2,3", "GPU-d,GPU-c", ["GPU-c", "GPU-d"]) == "3,2"
    assert session_devices("1", "GPU-a", ["GPU-b"]) == ""
    assert session_devices("1", "GPU-b") == ""  # (UUIDs unknown: as before)
    assert shared_process_allows(2, "GPU-c,GPU-d", None, ["GPU-c", "GPU-d"])
    assert not shared_process_allows(2, "GPU-d,GPU-c", None, ["GPU-c", "GPU-d"])


def test_a_shared_process_serves_only_all_of_its_devices():
    assert shared_process_allows(1, "0") and shared_process_allows(2, "0,1")
    assert not shared_process_allows(1, "") and not shared_process_allows(2, "1,0")
    assert not shared_process_allows(2, "0")
    assert shared_process_allows(1, "GPU-ab12", "GPU-ab12")  # the server's own value, inherited


@pytest.mark.parametrize("isolation", ["process", "thread"])
def test_a_program_sees_the_devices_its_variable_names(client_lib, tmp_path, isolation):
    server = ServerProcess(tmp_path, "--isolation", isolation)
    try:
        app = APPS_BUILD / "vector_add"
        r = run_remote(app, client_lib, server.address, env={"CUDA_VISIBLE_DEVICES": "0"})
        assert r.returncode == 0 and "vector_add: PASS" in r.stdout, r.stderr
        r = run_remote(app, client_lib, server.address, env={"CUDA_VISIBLE_DEVICES": ""})
        assert r.returncode != 0 and "CUDA_VISIBLE_DEVICES=''" in r.stderr, r.stderr
        if isolation == "process":  # device 1 of a server with one: the driver finds none there
            r = run_remote(app, client_lib, server.address, env={"CUDA_VISIBLE_DEVICES": "1"})
            assert r.returncode != 0 and "CUDA_ERROR_NO_DEVICE" in r.stderr, r.stderr
    finally:
        server.stop()
