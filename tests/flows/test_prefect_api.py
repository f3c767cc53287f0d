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
