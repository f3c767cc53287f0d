"""Any OpenAI-compatible chat endpoint as a model source: ``openai:BASE_URL#MODEL``.

The general-purpose LLM baseline (the paper compares six frontier models): the endpoint is prompted with the
codec's language reference (docs/codec.md) and a few training examples (never sealed ones), then the
dataset prompt itself as the user message; its reply (code fences stripped) is the attempt.  ``n`` attempts
come from one request with ``n`` (falling back to one request per attempt if the server ignores ``n``).
The API key, if the endpoint needs one, is read from ``$OPENAI_API_KEY``.  Only the standard library is used.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import urllib.error
import urllib.request
from pathlib import Path

from little_dragon.errors import UserError
from little_dragon.generation.config import GenerationConfig
from little_dragon.generation.sources import ModelSource
from little_dragon.script_budget import resolve_budget

log = logging.getLogger(__name__)

_FENCE = re.compile(r"```[a-zA-Z0-9_-]*\n(.*?)```", re.S)


def parse_spec(spec: str) -> tuple[str, str]:
    body = spec[len("openai:"):]
    url, _, model = body.partition("#")
    if not url.startswith(("http://", "https://")) or not model:
        raise UserError(f"{spec}: expected openai:http(s)://HOST[:PORT]/v1#MODEL")
    return url.rstrip("/"), model


def extract_script(content: str) -> str:
    """The script in a chat reply: the first fenced block if any, else the whole reply."""
    m = _FENCE.search(content or "")
    return (m.group(1) if m else (content or "")).strip() + "\n"


def system_prompt(few_shot: int, train_path: str | Path | None = None) -> str:
    from little_dragon.config import PROJECT_ROOT

    ref = PROJECT_ROOT / "docs" / "codec.md"
    parts = ["You write Apache TVM MetaSchedule optimization scripts in the Little Dragon codec language. "
             "Reply with the script only, no explanation.",
             "# Codec language reference\n" + (ref.read_text() if ref.is_file() else "(docs/codec.md missing)")]
    if few_shot and train_path and Path(train_path).is_file():
        from little_dragon.datasets.store import read_jsonl_rows  # refuses nothing here: a training file

        from little_dragon.datasets.guard import assert_not_sealed

        rows = read_jsonl_rows(assert_not_sealed(train_path))
        seen, shots = set(), []
        for r in rows:
            if r["task"] in seen and len(seen) < 2:
                continue
            seen.add(r["task"])
            shots.append(f"## Example ({r['task']})\n{r['prompt']}{r['completion']}")
            if len(shots) >= few_shot:
                break
        parts.append("# Examples\n" + "\n\n".join(shots))
    return "\n\n".join(parts)


class ChatGenerator:
    def __init__(self, source: ModelSource, cfg: GenerationConfig, train_path: str | Path | None = None):
        # an endpoint's model carries no budget of ours: 0 is the fallback (script_budget)
        self.source, self.cfg = source, dataclasses.replace(cfg, max_new_tokens=resolve_budget(cfg.max_new_tokens,
                                                                                                None))
        self.url, self.model = parse_spec(source.spec)
        if train_path is None:
            try:
                from little_dragon.config import load_section

                train_path = Path(load_section("datasets").out_dir) / "train.jsonl"
            except Exception:  # noqa: BLE001  no params: no few-shot examples
                train_path = None
        self.system = system_prompt(cfg.few_shot, train_path)

    def _post(self, prompt: str, n: int) -> list[str]:
        body = {"model": self.model, "messages": [{"role": "system", "content": self.system},
                                                  {"role": "user", "content": prompt}],
                "n": n, "temperature": self.cfg.temperature, "max_tokens": self.cfg.max_new_tokens}
        headers = {"Content-Type": "application/json"}
        if os.environ.get("OPENAI_API_KEY"):
            headers["Authorization"] = f"Bearer {os.environ['OPENAI_API_KEY']}"
        req = urllib.request.Request(f"{self.url}/chat/completions", data=json.dumps(body).encode(), headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.cfg.request_timeout_s) as resp:
                data = json.loads(resp.read())
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{self.url}: HTTP {e.code}: {e.read()[:300]!r}") from None
        except urllib.error.URLError as e:
            raise UserError(f"{self.url}: endpoint not reachable ({e.reason})") from None
        return [extract_script(c["message"]["content"]) for c in data.get("choices", [])]

    def generate(self, prompts: list[str], k: int) -> list[list[str]]:
        out = []
        for p in prompts:
            got = self._post(p, k)
            while len(got) < k:  # a server that ignores n answers once per request
                got += self._post(p, 1)
            out.append(got[:k])
        return out
