"""The headless-Chromium page check (``ops.browser.check_page``, over the DevTools protocol) waits in real time
for data a single-page app fetches from a slow API, takes the picture only then, and names the words a page
never shows. (The flaky Prefect-page check of test_retraining_deployment used ``--dump-dom`` with a virtual-time
budget; this small fixture does not reproduce that race, it pins the new behaviour.)"""
from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from little_dragon.ops.browser import DevTools, check_page, chromium_path, decided_version, ui_pages

needs_chromium = pytest.mark.skipif(chromium_path() is None, reason="no Chromium (apt-get install chromium)")

PAGE = b"""<!doctype html><html><body><h1>runs</h1><div id="runs">loading...</div>
<script>fetch('/api/runs').then(r => r.json()).then(d => {
  document.getElementById('runs').textContent = d.name + ' ' + d.state; });</script></body></html>"""


class _Handler(BaseHTTPRequestHandler):
    delay_s = 4.0

    def do_GET(self):  # noqa: N802
        if self.path == "/api/runs":
            time.sleep(self.delay_s)  # a loaded server answering late
            body, ctype = b'{"name": "vigorous-honeybee", "state": "Completed"}', "application/json"
        else:
            body, ctype = PAGE, "text/html"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def slow_app():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/"
    srv.shutdown()


@needs_chromium
def test_waits_for_the_words_an_api_fills_in_and_then_takes_the_picture(slow_app, tmp_path):
    shot = tmp_path / "page.png"
    assert check_page(slow_app, ["vigorous-honeybee", "Completed"], shot, timeout_s=60) == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@needs_chromium
def test_reports_the_words_a_page_never_shows(slow_app):
    with DevTools() as b:
        dom, lost = b.open(slow_app, ["vigorous-honeybee", "no-such-run"], timeout_s=8)
    assert "vigorous-honeybee" in dom and lost == ["no-such-run"]


class _Version:
    def __init__(self, version, tags):
        self.version, self.tags = version, tags


class _Client:
    def __init__(self, versions, champion=None):
        self.versions, self.champion = versions, champion

    def get_model_version_by_alias(self, name, alias):
        if self.champion is None:
            raise LookupError(f"{name}@{alias}: no such alias")
        return _Version(self.champion, {})

    def search_model_versions(self, query):
        return self.versions


def test_the_version_shown_is_the_champion_else_the_newest_the_gate_decided_on():
    decided = [_Version("1", {"promotion.decision": "refused"}), _Version("3", {"promotion.decision": "refused"}),
               _Version("4", {"stage": "rl"})]  # an RL version the gate never saw
    assert decided_version(_Client(decided, champion="3")) == "3"
    assert decided_version(_Client(decided)) == "3"
    assert decided_version(_Client([_Version("2", {})])) is None
    pages = ui_pages("http://p", "http://m", "/proj", {"id": "d", "name": "dep"}, {"id": "r", "name": "run"},
                     alias="champion", version="3")
    assert pages["mlflow-model-version"] == ("http://m/#/models/little-dragon/versions/3",
                                             ["Version 3", "sealed.correct_rate", "promotion.decision"])
    assert "champion" in pages["mlflow-registered-model"][1]
    assert "mlflow-model-version" not in ui_pages("http://p", "http://m", "/proj", {"id": "d", "name": "dep"},
                                                  {"id": "r", "name": "run"})


def test_the_prefect_ui_calls_the_api_on_the_port_its_server_runs_on():
    """`dragon services up --set prefect_port=N` (and the deployment test's free ports): the UI must call
    http://127.0.0.1:N/api, not Prefect's default :4200 ("Can't connect to Server API", empty pages)."""
    from little_dragon.ops.services import prefect_server_env

    env = prefect_server_env({"PATH": "/bin"}, 54401)
    assert env["PREFECT_UI_API_URL"] == "http://127.0.0.1:54401/api"
    assert env["PREFECT_SERVER_API_PORT"] == "54401" and env["PATH"] == "/bin"
