"""Golden files: the script of fixed traces (llvm, CUDA, tensor cores, a tuned database record) must not
change by accident; any intended change to the language regenerates them (``UPDATE_GOLDEN=1``)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from little_dragon.codec import decode, encode
from little_dragon.codec.canonical import dumps

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(p.stem for p in GOLDEN.glob("*.json"))


def test_golden_cases_exist():
    assert len(CASES) >= 4


@pytest.mark.parametrize("name", CASES)
def test_golden(name):
    trace_json = json.loads((GOLDEN / f"{name}.json").read_text())
    script_path = GOLDEN / f"{name}.script"
    text = encode(trace_json)
    if os.environ.get("UPDATE_GOLDEN") == "1":
        script_path.write_text(text)
    assert text == script_path.read_text()
    assert dumps(decode(script_path.read_text())) == dumps(trace_json)
