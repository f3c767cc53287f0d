"""A real OpenAI-compatible chat server on loopback, serving one of our own models (test fixture).

``POST /v1/chat/completions`` (``model``, ``messages``, ``n``, ``temperature``, ``max_tokens``) answers in
the OpenAI response format; ``GET /v1/models`` lists the model.  The model sees the last user message (the
dataset prompt) as its prompt, exactly as our models are trained; the system message is accepted and ignored
(a tiny from-scratch model cannot read a language reference).  Standard library HTTP only.
"""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ChatServer:
    def __init__(self, model: Any, tokenizer: Any, name: str = "tiny"):
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def _send(self, code: int, obj: dict) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": server.name, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                if self.path.rstrip("/") != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if body.get("model") != server.name:
                    return self._send(404, {"error": {"message": f"model {body.get('model')!r} not found"}})
                server.requests.append(body)
                prompt = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
                n = int(body.get("n", 1))
                from little_dragon.training.callbacks import sample_scripts

                with server._lock:  # one generate at a time on the one model
                    texts = sample_scripts(server.model, server.tokenizer, [prompt], int(body.get("max_tokens", 256)),
                                           float(body.get("temperature", 1.0)), num_return_sequences=n)
                self._send(200, {"id": f"chatcmpl-{time.time_ns()}", "object": "chat.completion",
                                 "created": int(time.time()), "model": server.name,
                                 "choices": [{"index": i, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": f"```\n{t}```"}}
                                             for i, t in enumerate(texts)]})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "ChatServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
