"""A Prefect API for this process, and child servers that never outlive their parent.

Prefect 3 starts a *temporary* API server (uvicorn in a subprocess) when a flow runs with no
``PREFECT_API_URL``, and stops it only from ``atexit``: a harvest killed by SIGTERM or SIGHUP (a closed
terminal, ``dvc repro`` interrupted, a CI timeout) left that server running, holding its port and the
sqlite database.  ``prefect_api()`` replaces it: the configured server when there is one, else a temporary
loopback server that this process owns, started in its own process group with a parent-death signal (the
kernel kills it even if we are SIGKILLed) and stopped on exit, SIGTERM and SIGHUP alike.
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    os.setsid()  # own process group: a terminal's Ctrl-C does not race our orderly stop; killpg reaches all
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def spawn(argv: Sequence[str], *, env: dict[str, str] | None = None, cwd: str | os.PathLike | None = None,
          log_path: str | os.PathLike | None = None) -> subprocess.Popen:
    """Start ``argv`` as a child that dies with this process (see module doc); output to ``log_path``."""
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 (owned by the child)
    try:
        return subprocess.Popen(list(argv), env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
    finally:
        if log_path:
            out.close()


def stop(proc: subprocess.Popen | int, grace_s: float = 8.0) -> None:
    """SIGTERM the child's whole process group, then SIGKILL what is left after ``grace_s``."""
    pid = proc if isinstance(proc, int) else proc.pid
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            break
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            if isinstance(proc, subprocess.Popen):
                if proc.poll() is not None and not _group_alive(pid):
                    return
            elif not _group_alive(pid):
                return
            time.sleep(0.1)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout_s: float, proc: subprocess.Popen | None = None, what: str = "server") -> None:
    """Poll ``url`` until it answers 200; a clear error if the child exits or time runs out."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} before answering {url}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2.0).status_code == 200:
                return
        time.sleep(0.25)
    raise RuntimeError(f"{what} did not answer {url} within {timeout_s:.0f} s")


@contextlib.contextmanager
def exit_on_signals() -> Iterator[None]:
    """Turn SIGTERM/SIGHUP into ``SystemExit`` (and SIGINT into ``KeyboardInterrupt`` even where it was
    inherited ignored) while inside, so ``finally`` blocks (stopping children) run.

    Only the main thread can install handlers; elsewhere this is a no-op (the parent-death signal still
    reaps the children)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGHUP)}
    # Ctrl-C (SIGINT) stops too, as KeyboardInterrupt: a process started in the background by a shell without
    # job control inherits SIGINT ignored, and Python then installs no handler for it (seen: `dragon services
    # up` under a backgrounded CI script went on running after the SIGINT that stops it)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        old[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def configured_api_url() -> str | None:
    from prefect.settings import PREFECT_API_URL

    return os.environ.get("PREFECT_API_URL") or PREFECT_API_URL.value() or None


@contextlib.contextmanager
def prefect_api(log_dir: str | os.PathLike | None = None) -> Iterator[str]:
    """Yield the Prefect API URL flows in this block report to, starting a temporary server if needed.

    With ``PREFECT_API_URL`` set (a services launcher, a team server, CI) this is a no-op.  Otherwise a
    loopback server (API only, no UI) runs for the duration of the block and is stopped afterwards, also
    on SIGTERM/SIGHUP, and by the kernel if this process is SIGKILLed."""
    url = configured_api_url()
    if url:
        yield url
        return
    import prefect
    from prefect.settings import PREFECT_API_URL, PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS, \
        temporary_settings

    port = free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
           "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.pop("PREFECT_API_URL", None)
    argv = [sys.executable, "-m", "uvicorn", "--app-dir", str(Path(prefect.__file__).parent.parent), "--factory",
            "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "error", "--lifespan", "on"]
    log_path = Path(log_dir) / "prefect-temporary-server.log" if log_dir else None
    log.info("starting a temporary Prefect API on %s (stopped when this run ends)", url)
    proc = spawn(argv, env=env, log_path=log_path)
    try:
        with exit_on_signals():
            # at least 2 min: on a loaded 2-core machine the server's first start (migrations) takes > 20 s
            timeout_s = max(120.0, float(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()))
            wait_http(f"{url}/health", timeout_s, proc, "temporary Prefect server")
            old = os.environ.get("PREFECT_API_URL")
            os.environ["PREFECT_API_URL"] = url
            try:
                with temporary_settings(updates={PREFECT_API_URL: url}):
                    yield url
            finally:
                if old is None:
                    os.environ.pop("PREFECT_API_URL", None)
                else:
                    os.environ["PREFECT_API_URL"] = old
    finally:
        _drain_api_logs()
        stop(proc)
        log.info("temporary Prefect API on %s stopped", url)


def _drain_api_logs(timeout_s: float = 10.0) -> None:
    """Send the flow-run logs Prefect still holds before its server goes away: otherwise its log worker
    retries them against the stopped server at exit (a harvest stage ended 72 s after its work did,
    "Error logging to API ... All connection attempts failed")."""
    try:
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=timeout_s)
    except Exception as e:  # noqa: BLE001 - best effort: the logs are also in the stage's own log
        log.debug("draining Prefect's API log worker failed: %s", e)
