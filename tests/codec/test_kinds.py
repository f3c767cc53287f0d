"""The kind table agrees with TVM's registry, the grammar and docs/codec.md."""
from __future__ import annotations

from pathlib import Path

from little_dragon.codec.docs import forms_markdown, kinds_markdown
from little_dragon.codec.grammar import grammar_text, parser
from little_dragon.codec.kinds import SPECS, kinds_table

DOC = Path(__file__).resolve().parents[2] / "docs" / "codec.md"


def test_every_spec_is_a_registered_tvm_kind_with_a_unique_mnemonic():
    rows = {r["kind"]: r for r in kinds_table()}
    for spec in SPECS:
        assert rows[spec.kind]["mnemonic"] == spec.mnemonic
    assert len({s.mnemonic for s in SPECS}) == len(SPECS)
    assert any(r["mnemonic"] is None for r in rows.values())  # the registry has kinds we do not speak


def test_docs_show_the_generated_table_and_grammar():
    doc = DOC.read_text()
    assert kinds_markdown() in doc, "docs/codec.md is stale: regenerate with `dragon codec kinds`"
    assert forms_markdown() in doc, "docs/codec.md is stale: regenerate with `dragon codec kinds`"
    assert grammar_text().strip() in doc
    parser()  # the grammar builds as LALR without conflicts
