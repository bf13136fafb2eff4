"""Settings parse as a tool's do: sizes with units, booleans, names from a list; what does not parse is one
line naming the variable and what it takes (Settings.errors), and the default stands in."""

from __future__ import annotations

import os

import pytest

from cuwire.settings import Settings, parse_bool, parse_size


@pytest.mark.parametrize("text,size", [("8589934592", 8 << 30), ("8G", 8 << 30), ("8g", 8 << 30), ("8GiB", 8 << 30),
                                       ("512MiB", 512 << 20), ("512M", 512 << 20), ("64k", 64 << 10),
                                       ("1.5G", 3 << 29), ("0", 0), (" 4 MB ", 4 << 20)])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "8X", "G", "-1", "8 G B", "eight"])
def test_sizes_that_do_not_parse(text):
    with pytest.raises(ValueError, match="expected a size in bytes"):
        parse_size(text)


def test_booleans():
    assert [parse_bool(t) for t in ("1", "true", "Yes", "ON")] == [True] * 4
    assert [parse_bool(t) for t in ("0", "false", "No", "off")] == [False] * 4
    with pytest.raises(ValueError, match="expected 1, true, yes or on"):
        parse_bool("2")


def test_the_sending_thread_is_on_off_or_auto(monkeypatch):
    """CUWIRE_SEND_THREAD takes a boolean's words or auto; auto starts the thread only where the process may
    use SEND_THREAD_CORES cores (settings.sends_from_a_thread)."""
    from cuwire.settings import SEND_THREAD_CORES, sends_from_a_thread

    for text, value in (("1", "on"), ("yes", "on"), ("0", "off"), ("Off", "off"), ("auto", "auto")):
        monkeypatch.setenv("CUWIRE_SEND_THREAD", text)
        assert Settings().send_thread == value
    monkeypatch.setenv("CUWIRE_SEND_THREAD", "sometimes")
    assert Settings().errors == ["CUWIRE_SEND_THREAD='sometimes': expected 1, true, yes or on, 0, false, no or off, "
                                 "or auto"]
    assert sends_from_a_thread("on") and not sends_from_a_thread("off")
    cores = len(os.sched_getaffinity(0))
    assert sends_from_a_thread("auto") == (cores >= SEND_THREAD_CORES)


def test_variables_parse_and_errors_name_them(monkeypatch):
    monkeypatch.setenv("CUWIRE_MAX_BUFFER", "1G")
    monkeypatch.setenv("CUWIRE_STATS", "true")
    monkeypatch.setenv("CUWIRE_TRACE", "remote")
    monkeypatch.setenv("CUWIRE_STRIPES", "four")
    monkeypatch.setenv("CUWIRE_LOG_LEVEL", "verbose")
    s = Settings()
    assert (s.max_buffer, s.stats, s.trace) == (1 << 30, True, "remote")
    assert (s.stripes, s.log_level) == (4, "info")  # the defaults stand in for what did not parse
    assert s.errors == ["CUWIRE_LOG_LEVEL='verbose': expected debug, info, warning or error",
                        "CUWIRE_STRIPES='four': expected a whole number, 0 or more"]


def test_given_values_win_and_are_checked_alike(monkeypatch):
    monkeypatch.setenv("CUWIRE_LOG_LEVEL", "debug")
    assert Settings(log_level="error").log_level == "error"
    assert Settings(log_level="loud").errors == ["CUWIRE_LOG_LEVEL='loud': expected debug, info, warning or error"]
    assert Settings(drain_seconds=2.5).drain_seconds == 2.5


def test_children_get_what_parses_back(monkeypatch):
    """to_env passes settings to a child process (the listener's sessions): the child reads the same."""
    monkeypatch.setenv("CUWIRE_HOST_MEMORY", "2G")
    monkeypatch.setenv("CUWIRE_STATS", "yes")
    env = Settings().to_env()
    assert "CUWIRE_ERRORS" not in env
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    again = Settings()
    assert (again.host_memory, again.stats, again.errors) == (2 << 30, True, [])


def test_a_list_of_servers_is_a_program_device_list(monkeypatch, capsys):
    """`CUWIRE_SERVER=a:1,b:2` is a program's device list across servers (issue 39): `cuwire run` and the
    client take it; at most address_space.MOST_SERVERS servers, each named once; the commands that talk
    to one server refuse a list by name (--server alike), where it was looked up as one host name before."""
    from cuwire import cli
    from cuwire.address_space import MOST_SERVERS

    monkeypatch.setenv("CUWIRE_SERVER", "gpu1:50551, gpu2:50551")
    s = Settings()
    assert (s.server, s.errors) == ("gpu1:50551, gpu2:50551", [])
    assert cli.main(["doctor"]) == 2
    assert "cuwire doctor: CUWIRE_SERVER 'gpu1:50551, gpu2:50551': names 2 servers" in capsys.readouterr().err
    monkeypatch.setenv("CUWIRE_SERVER", ",".join(f"gpu{i}:50551" for i in range(MOST_SERVERS + 1)))
    s = Settings()
    assert s.server == "127.0.0.1:50551" and f"takes at most {MOST_SERVERS}" in s.errors[0], s.errors
    monkeypatch.setenv("CUWIRE_SERVER", "gpu1:50551,gpu1:50551")
    assert "names a server twice" in Settings().errors[0]
    monkeypatch.delenv("CUWIRE_SERVER")
    assert Settings(server="gpu1:50551").errors == []
    assert cli.main(["doctor", "--server", "gpu1:50551,gpu2:50551"]) == 2
    assert "cuwire doctor: --server 'gpu1:50551,gpu2:50551': names 2 servers" in capsys.readouterr().err
