"""Headless Chromium (Debian's ``chromium`` package) over the UIs: rendered DOM text and screenshots.

The Prefect and MLflow UIs are single-page apps. ``check_page`` / ``DevTools`` (the DevTools protocol) load a
page and wait in real time until it shows the words it must show, then take the picture: what the UI tests and
``scripts/ui_screenshots.py`` use. ``rendered_dom`` / ``screenshot`` (``--dump-dom`` / ``--screenshot`` with a
``--virtual-time-budget``) remain for static pages; on a loaded machine they dumped the Prefect UI before its API
data arrived."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def chromium_path() -> str | None:
    env = os.environ.get("DRAGON_CHROMIUM")
    if env:
        return env
    return next((p for p in map(shutil.which, CANDIDATES) if p), None)


def _argv(extra: list[str], budget_ms: int, size: tuple[int, int]) -> list[str]:
    exe = chromium_path()
    if exe is None:
        raise FileNotFoundError("no Chromium found (apt-get install chromium, or set DRAGON_CHROMIUM)")
    return [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
            "--no-first-run", "--disable-extensions", "--allow-file-access-from-files",
            f"--window-size={size[0]},{size[1]}", f"--virtual-time-budget={budget_ms}", *extra]


def _run(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="dragon-chromium-") as profile:
        return subprocess.run([*argv, f"--user-data-dir={profile}"], capture_output=True, text=True,
                              timeout=timeout_s)


def rendered_dom(url: str, budget_ms: int = 20000, size: tuple[int, int] = (1440, 1000),
                 timeout_s: float = 120.0) -> str:
    """The page's DOM after its scripts ran (``--dump-dom``)."""
    res = _run(_argv(["--dump-dom", url], budget_ms, size), timeout_s)
    if res.returncode != 0 and not res.stdout:
        raise RuntimeError(f"chromium --dump-dom {url} exited {res.returncode}: {res.stderr[-500:]}")
    return res.stdout


def screenshot(url: str, path: str | os.PathLike, budget_ms: int = 20000, size: tuple[int, int] = (1440, 1000),
               timeout_s: float = 120.0) -> Path:
    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    res = _run(_argv([f"--screenshot={path}", url], budget_ms, size), timeout_s)
    if not path.exists():
        raise RuntimeError(f"chromium --screenshot {url} wrote nothing (exit {res.returncode}): {res.stderr[-500:]}")
    return path


def decided_version(client, model_name: str = "little-dragon", alias: str = "champion") -> str | None:
    """The version to show: the ``alias`` holder, else the newest version the promotion gate decided on."""
    try:
        return str(client.get_model_version_by_alias(model_name, alias).version)
    except Exception:  # noqa: BLE001  no alias yet
        pass
    decided = [v for v in client.search_model_versions(f"name = '{model_name}'") if "promotion.decision" in v.tags]
    return str(max(int(v.version) for v in decided)) if decided else None


def ui_pages(prefect_url: str, mlflow_url: str, project_root: str | os.PathLike, deployment: dict,
             flow_run: dict, model_name: str = "little-dragon", alias: str | None = None,
             version: str | None = None) -> dict[str, tuple[str, list[str]]]:
    """The pages a user opens, each with the words it must show: name -> (url, words); ``alias``: the
    registered model page must show it (once the promotion gate has set it); ``version``: a version the gate
    decided on, whose page shows its sealed-evaluation metrics and the decision (tags)."""
    docs = Path(project_root) / "monitoring" / "data-docs"
    return {
        "prefect-deployment": (f"{prefect_url}/deployments/deployment/{deployment['id']}",
                               [deployment["name"], flow_run["name"]]),
        "prefect-flow-run": (f"{prefect_url}/runs/flow-run/{flow_run['id']}", [flow_run["name"], "Completed"]),
        "mlflow-registered-model": (f"{mlflow_url}/#/models/{model_name}", [model_name, "Version 1", *([alias] if alias else [])]),
        **({"mlflow-model-version": (f"{mlflow_url}/#/models/{model_name}/versions/{version}",
                                     [f"Version {version}", "sealed.correct_rate", "promotion.decision"])}
           if version else {}),
        "gx-data-docs": ((docs / "examples" / "index.html").as_uri(), ["examples", "family_mix"]),
        # the drift suite's site (a page naming the reason when the check was skipped: a first harvest)
        "gx-data-docs-drift": ((docs / "drift" / "index.html").as_uri(), ["drift"]),
    }


# Run once a page shows its words, before the picture: close the MLflow Assistant side panel (it hides a third
# of the page) and expand a model version's collapsed "Tags" (its sealed-evaluation metrics and the promotion
# gate's decision live there). Harmless on pages without them.
TIDY_JS = r"""(() => {
  const buttons = Array.from(document.querySelectorAll('button,[role=button]'));
  for (const b of buttons) if (b.getAttribute('aria-label') === 'Close' && b.closest('[class*=ssistant],aside,div')
                               && document.body.textContent.includes('MLflow Assistant')) { b.click(); break; }
  for (const b of buttons) if (b.textContent.trim() === 'Tags' && b.getAttribute('aria-expanded') !== 'true') b.click();
  return true;
})()"""


class DevTools:
    """One headless Chromium driven over the DevTools protocol (``--remote-debugging-port``): navigate, then
    poll the live DOM until the page shows the words it must show, and only then take the picture.

    ``--dump-dom`` / ``--screenshot`` with ``--virtual-time-budget`` return at a fixed point of *virtual* time;
    a single-page app whose API answers slowly (the Prefect UI on a loaded machine) was dumped before its data
    arrived, even with a 60 s budget. Waiting for the words in real time has no such race."""

    def __init__(self, size: tuple[int, int] = (1440, 1000), start_timeout_s: float = 60.0):
        exe = chromium_path()
        if exe is None:
            raise FileNotFoundError("no Chromium found (apt-get install chromium, or set DRAGON_CHROMIUM)")
        self._profile = tempfile.TemporaryDirectory(prefix="dragon-chromium-")
        self.size = size
        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars",
             "--no-first-run", "--disable-extensions", "--allow-file-access-from-files",
             f"--window-size={size[0]},{size[1]}", "--remote-debugging-port=0", "--remote-allow-origins=*",
             f"--user-data-dir={self._profile.name}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        self._id = 0
        try:
            self._ws = self._connect(Path(self._profile.name) / "DevToolsActivePort", start_timeout_s)
        except BaseException:
            self.close()
            raise

    def _connect(self, port_file: Path, timeout_s: float):
        import json
        import time
        import urllib.request

        from websockets.sync.client import connect

        deadline = time.monotonic() + timeout_s
        while not (port_file.exists() and port_file.read_text().strip()):
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited {self.proc.returncode}: {self.proc.stderr.read()[-500:]!r}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"chromium wrote no DevToolsActivePort in {timeout_s:.0f} s")
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        while True:  # the about:blank page target appears shortly after the port file
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                break
            if time.monotonic() > deadline:
                raise RuntimeError("chromium shows no page target")
            time.sleep(0.2)
        return connect(pages[0]["webSocketDebuggerUrl"], max_size=None, open_timeout=timeout_s)

    def call(self, method: str, timeout_s: float = 60.0, **params):
        import json

        self._id += 1
        self._ws.send(json.dumps({"id": self._id, "method": method, "params": params}))
        while True:  # events interleave with replies: skip them
            msg = json.loads(self._ws.recv(timeout=timeout_s))
            if msg.get("id") == self._id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def dom(self) -> str:
        r = self.call("Runtime.evaluate", expression="document.documentElement ? document.documentElement.outerHTML : ''",
                      returnByValue=True)
        return r.get("result", {}).get("value") or ""

    def open(self, url: str, words: list[str] | tuple[str, ...] = (), timeout_s: float = 90.0,
             settle_s: float = 2.0, then_js: str | None = TIDY_JS) -> tuple[str, list[str]]:
        """Navigate to ``url`` and wait (real time, up to ``timeout_s``) until its DOM holds every word, run
        ``then_js``, then wait ``settle_s`` more for the rendering to finish; returns (DOM, words still missing)."""
        import time

        self.call("Emulation.setDeviceMetricsOverride", width=self.size[0], height=self.size[1],
                  deviceScaleFactor=1, mobile=False)
        self.call("Page.navigate", url=url)
        deadline = time.monotonic() + timeout_s
        while True:
            time.sleep(0.5)
            dom = self.dom()
            lost = [w for w in words if w not in dom]
            ready = self.call("Runtime.evaluate", expression="document.readyState",
                              returnByValue=True).get("result", {}).get("value") == "complete"
            if (ready and not lost) or time.monotonic() > deadline:
                break
        if then_js:
            self.call("Runtime.evaluate", expression=then_js, returnByValue=True)
        time.sleep(settle_s)
        dom = self.dom()
        return dom, [w for w in words if w not in dom]

    def screenshot(self, path: str | os.PathLike) -> Path:
        import base64

        path = Path(path).resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self) -> None:
        import signal

        ws = getattr(self, "_ws", None)
        if ws is not None:
            try:
                ws.close()
            except Exception:  # noqa: BLE001
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.proc.wait()
        self._profile.cleanup()

    def __enter__(self) -> "DevTools":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# Seconds to wait after a page shows its words, before the picture: the Prefect flow-run page draws its task
# graph on a canvas (no words to wait for) after a further API call; 2 s showed an empty graph on a loaded machine.
PAGE_SETTLE_S = {"prefect-flow-run": 15.0}


def check_page(url: str, words: list[str] | tuple[str, ...], shot: str | os.PathLike | None = None,
               timeout_s: float = 90.0, size: tuple[int, int] = (1440, 1000), settle_s: float = 2.0) -> list[str]:
    """Open ``url`` in a fresh headless Chromium, wait until it shows ``words`` (or ``timeout_s``), then
    ``settle_s``, save the picture at ``shot``; returns the words the page still lacks."""
    with DevTools(size) as b:
        _, lost = b.open(url, words, timeout_s, settle_s=settle_s)
        if shot is not None:
            b.screenshot(shot)
        return lost
