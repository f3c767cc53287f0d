"""The temporary Prefect server never outlives its process (it did: a SIGTERMed harvest left it running)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import httpx
import pytest

CHILD = textwrap.dedent("""
    import os, sys, time
    os.environ.pop("PREFECT_API_URL", None)
    from prefect import flow
    from little_dragon.prefect_api import prefect_api

    @flow
    def probe():
        return 1

    with prefect_api() as url:
        assert probe() == 1          # a real flow run against the temporary server
        print(url, flush=True)
        time.sleep(600)
""")


def _alive(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM])  # SIGKILL: the kernel's parent-death signal
def test_temporary_server_dies_with_its_process(tmp_path, sig):
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect")}
    env.pop("PREFECT_API_URL", None)
    proc = subprocess.Popen([sys.executable, "-c", CHILD], env=env, stdout=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), f"child printed {url!r}"
        assert _alive(url)
        proc.send_signal(sig)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 20
        while _alive(url) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _alive(url), f"temporary Prefect server on {url} outlived its process ({sig.name})"
    finally:
        if proc.poll() is None:
            proc.kill()


SIGINT_CHILD = textwrap.dedent("""
    import time
    from little_dragon.prefect_api import exit_on_signals
    try:
        with exit_on_signals():
            print("ready", flush=True)
            time.sleep(120)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
""")


def test_sigint_stops_a_process_that_inherited_it_ignored():
    """Started the way a backgrounded script starts it (SIGINT ignored), a ``dragon services up`` must still stop
    on SIGINT (Ctrl-C): inside ``exit_on_signals`` it is a KeyboardInterrupt."""
    proc = subprocess.Popen([sys.executable, "-c", SIGINT_CHILD], stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        assert "interrupted" in out
    finally:
        if proc.poll() is None:
            proc.kill()
