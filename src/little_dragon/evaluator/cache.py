"""Result cache: (workload hash, canonical script, target, device, protocol) -> raw result, in sqlite.

RL re-samples the same scripts and evaluation re-scores them; a hit costs a primary-key lookup.  Only
deterministic outcomes are stored (never timeouts or worker crashes, which may be load or flukes).
The reward is not stored: it is recomputed from the raw result, so new reward weights apply to old hits.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
  key TEXT PRIMARY KEY, workload_hash TEXT, target TEXT, device TEXT, script TEXT, raw TEXT, created REAL);
CREATE TABLE IF NOT EXISTS baselines (
  key TEXT PRIMARY KEY, workload_hash TEXT, target TEXT, device TEXT, us REAL, kind TEXT, spread REAL,
  created REAL);
"""


def result_key(workload_hash: str, canonical_script: str, target: dict, device: str, protocol: str) -> str:
    blob = json.dumps([workload_hash, canonical_script, target, device, protocol], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def baseline_key(workload_hash: str, target: dict, device: str, protocol: str) -> str:
    return hashlib.sha256(json.dumps([workload_hash, target, device, protocol], sort_keys=True).encode()).hexdigest()


class ResultCache:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), timeout=30.0, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT raw FROM results WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(self, key: str, workload_hash: str, target: dict, device: str, script: str, raw: dict) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO results VALUES (?,?,?,?,?,?,?)",
                             (key, workload_hash, json.dumps(target, sort_keys=True), device, script,
                              json.dumps(raw), time.time()))

    def get_baseline(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT us, kind, spread FROM baselines WHERE key=?", (key,)).fetchone()
        return {"us": row[0], "kind": row[1], "spread": row[2]} if row else None

    def put_baseline(self, key: str, workload_hash: str, target: dict, device: str, b: dict) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO baselines VALUES (?,?,?,?,?,?,?,?)",
                             (key, workload_hash, json.dumps(target, sort_keys=True), device, b["us"], b["kind"],
                              b.get("spread"), time.time()))

    def close(self) -> None:
        with self._lock:
            self._db.close()
