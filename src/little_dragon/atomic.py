"""Crash-safe file writes: a reader never sees half a file, a killed writer leaves the old file intact."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``dest``; on success it is renamed onto ``dest`` (files or folders)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)) / (dest.name + suffix)
    try:
        yield tmp
        if tmp.is_dir():
            if dest.exists():
                old = dest.with_name(f".{dest.name}.old.{os.getpid()}")
                os.replace(dest, old)
                os.replace(tmp, dest)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, dest)
        elif tmp.exists():
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, dest)
        _fsync_dir(dest.parent)
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)


def write_text(dest: str | os.PathLike, text: str) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_text(text)


def write_bytes(dest: str | os.PathLike, data: bytes) -> None:
    with atomic_path(dest) as tmp:
        tmp.write_bytes(data)


def write_json(dest: str | os.PathLike, obj: Any, **kw: Any) -> None:
    kw.setdefault("indent", 2)
    kw.setdefault("sort_keys", True)
    write_text(dest, json.dumps(obj, **kw) + "\n")


def write_parquet(dest: str | os.PathLike, df: "Any") -> None:
    with atomic_path(dest) as tmp:
        df.to_parquet(tmp, index=False)


def append_jsonl(path: str | os.PathLike, rows: Iterable[dict[str, Any]]) -> None:
    """Append whole lines and fsync; ``read_jsonl`` drops a torn last line left by a kill."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    with open(path, "a") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read a JSON-lines file written by ``append_jsonl``; a torn (unterminated) last line is ignored."""
    path = Path(path)
    if not path.exists():
        return []
    out = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.endswith("\n"):
                break  # torn tail of a killed writer
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{lineno}: corrupt JSON line: {e}") from e
    return out
