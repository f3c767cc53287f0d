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


def test_the_tensor_intrinsics_are_the_ones_tvm_registers():
    """``kinds.TENSOR_INTRINSICS`` (the names the constraint lets `tensorize` take) is exactly the installed TVM's
    registry as its modules name it (every ``*_INTRIN`` string of ``tvm.s_tir.tensor_intrin``'s modules that is
    registered), and holds every intrinsic the codec abbreviates."""
    import importlib
    import pkgutil

    from tvm.s_tir import TensorIntrin

    from little_dragon.codec.kinds import INTRIN_ABBREV, TENSOR_INTRINSICS
    from little_dragon.tvmx.build import import_tensor_intrinsics

    import_tensor_intrinsics()
    import tvm.s_tir.tensor_intrin as package

    registered = set()
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        registered |= {v for k, v in vars(module).items()
                       if isinstance(v, str) and k.endswith("INTRIN") and TensorIntrin.get(v, allow_missing=True)}
    assert set(TENSOR_INTRINSICS) == registered
    assert set(INTRIN_ABBREV) <= registered
