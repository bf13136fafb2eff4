"""Signals reach a program run through cuwire as they reach it natively: the default action (a Ctrl-C ends
it) or the program's own handler, never the handler of the Python that the client library embeds.

Each signal is sent as a terminal sends it (to the whole process group: `cuwire run` and the program), and
as `kill` or a supervisor sends it (to `cuwire run` alone, which passes it on)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, compile_against_client

# With an argument, the program handles the four signals itself: a handled signal ends the loop and the
# program makes CUDA calls after it, then exits with 40 + the signal's number. Without one it keeps the
# default actions. Either way it works through the session (copies) until signalled.
PROGRAM = r"""
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include "cuda_api.h"
static volatile sig_atomic_t got;
static void on_signal(int sig) { got = sig; }
int main(int argc, char **argv) {
    int sigs[] = {SIGINT, SIGTERM, SIGQUIT, SIGHUP};
    if (argc > 1)
        for (int i = 0; i < 4; i++) signal(sigs[i], on_signal);
    CUdevice dev; CUcontext ctx; CUdeviceptr d; char in[4096], out[4096];
    memset(in, 7, sizeof in);
    if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx))
        return 1;
    if (cuMemAlloc_v2(&d, sizeof in) != 0 || cuMemcpyHtoD_v2(d, in, sizeof in) != 0) return 1;
    printf("ready\n"); fflush(stdout);  /* (a signal may come before the loop's first copy) */
    while (!got) cuMemcpyHtoD_v2(d, in, sizeof in);
    if (cuMemcpyDtoH_v2(out, d, sizeof out) || memcmp(in, out, sizeof in) || cuMemFree_v2(d)) return 2;
    printf("handled %d, CUDA still works\n", (int)got);
    return 40 + got;
}
"""

SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGQUIT, signal.SIGHUP]


@pytest.fixture(scope="module")
def program(client_lib, tmp_path_factory) -> Path:
    return compile_against_client(PROGRAM, tmp_path_factory.mktemp("signals"), client_lib, "signalled")


def no_core_dumps() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGQUIT's default action dumps core


def run_and_signal(program: Path, server: str, sig: signal.Signals, *, to_group: bool, handler: bool):
    """`cuwire run` the program in a process group of its own (as a shell's job), signal it once it works."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUWIRE_SERVER", "CUWIRE_TOKEN")}
    cmd = [sys.executable, "-m", "cuwire.cli", "run", "--server", server, "--", str(program),
           *(["handle"] if handler else [])]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT,
                            start_new_session=True, preexec_fn=no_core_dumps)
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        if to_group:
            os.killpg(proc.pid, sig)  # what a terminal does for Ctrl-C, Ctrl-\ or a hang-up
        else:
            proc.send_signal(sig)  # kill PID of cuwire run: passed on
        rc = proc.wait(20)
        return rc, proc.stdout.read(), proc.stderr.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
@pytest.mark.parametrize("to_group", [True, False], ids=["terminal", "kill"])
def test_default_action_ends_the_program(sig, to_group, program, server):
    rc, _out, err = run_and_signal(program, server.address, sig, to_group=to_group, handler=False)
    assert rc == 128 + sig, err
    assert f"killed by {sig.name} (exit code {128 + sig})" in err
    assert "KeyboardInterrupt" not in err and "Traceback" not in err


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_the_program_s_own_handler_runs(sig, program, server):
    rc, out, err = run_and_signal(program, server.address, sig, to_group=True, handler=True)
    assert rc == 40 + sig, err
    assert f"handled {int(sig)}, CUDA still works" in out
    assert "KeyboardInterrupt" not in err and "Traceback" not in err
