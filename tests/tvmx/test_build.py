"""The harvest's builder: TVM's LocalBuilder whose popen workers live across build calls."""
from __future__ import annotations

import os

import pytest


def _inputs(*sizes: int):
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    target = tvm.target.Target({"kind": "llvm", "num-cores": 2})
    out = []
    for n in sizes:
        a = te.placeholder((n, n), name="A")
        b = te.compute((n, n), lambda i, j: a[i, j] * 2.0, name="B")
        mod = tvm.IRModule({"main": te.create_prim_func([a, b]).with_attr("global_symbol", "main")})
        out.append(ms.builder.BuilderInput(mod, target))
    return out


def _built(results) -> None:
    for r in results:
        assert r.error_msg is None, r.error_msg
        assert os.path.isfile(str(r.artifact_path))


def test_builder_workers_are_reused_across_build_calls():
    """Two build calls (two workloads' batches) are served by the same popen worker processes; TVM's own
    LocalBuilder starts new ones in every call."""
    from little_dragon.tvmx.build import local_builder

    builder = local_builder(2, 30.0)
    assert local_builder(2, 30.0) is builder  # one per process and setting
    _built(builder.build(_inputs(16, 32)))
    first = builder.worker_pids()
    assert len(first) == 2
    _built(builder.build(_inputs(48, 64, 80)))
    assert builder.worker_pids() == first


def test_builder_worker_is_recycled_after_its_uses(monkeypatch):
    from little_dragon.tvmx import build

    monkeypatch.setattr(build, "BUILDER_MAX_USES", 2)
    builder = build._persistent_builder_cls()(max_workers=1, timeout_sec=30.0, f_build=build.fast_build)
    _built(builder.build(_inputs(16, 32)))
    first = builder.worker_pids()
    _built(builder.build(_inputs(48)))  # the third build of that worker: a fresh process
    second = builder.worker_pids()
    assert len(first) == len(second) == 1 and first != second


def test_a_failing_build_is_reported_and_the_worker_still_builds():
    """An exception in the build function is the candidate's build error (TVM's text), nothing else fails."""
    from little_dragon.tvmx import build

    builder = build._persistent_builder_cls()(max_workers=1, timeout_sec=30.0, f_build="dragon.test.no_such_build")
    res = builder.build(_inputs(16))
    assert res[0].artifact_path is None and "LocalBuilder: An exception occurred" in res[0].error_msg
    assert "dragon.test.no_such_build" in res[0].error_msg
    pids = builder.worker_pids()
    assert len(pids) == 1
    res = builder.build(_inputs(32))
    assert "LocalBuilder: An exception occurred" in res[0].error_msg
    assert builder.worker_pids() == pids  # an exception does not cost the worker


@pytest.mark.parametrize("timeout", [0.001])
def test_a_timed_out_build_is_a_timeout_and_the_next_call_gets_a_new_worker(timeout):
    from little_dragon.tvmx import build

    builder = build._persistent_builder_cls()(max_workers=1, timeout_sec=timeout, f_build=build.fast_build)
    res = builder.build(_inputs(64))
    assert res[0].artifact_path is None and "Timeout" in res[0].error_msg
    assert builder.worker_pids() == []  # TVM's pool killed it; the next send starts another


def _passes_run(lower) -> list[str]:
    import tvm
    from tvm.ir.instrument import pass_instrument

    names: list[str] = []

    @pass_instrument
    class Names:
        def run_before_pass(self, mod, info):
            names.append(info.name)

    with tvm.transform.PassContext(instruments=[Names()], config={"tirx.disable_storage_rewrite": True}):
        lower()
    return names


def test_lowering_leaves_out_the_passes_it_is_told_to_and_keeps_the_context():
    """``lower_for_target(.., skip=)``: the end check's lowering without its rewrites for speed; the caller's context
    (here: an instrument and StorageRewrite turned off) still holds."""
    from little_dragon.generation.schedule_worker import END_CHECK_SKIPPED_PASSES
    from little_dragon.tvmx.build import lower_for_target

    mod = _inputs(64)[0].mod
    full = _passes_run(lambda: lower_for_target(mod, "llvm"))
    cut = _passes_run(lambda: lower_for_target(mod, "llvm", skip=END_CHECK_SKIPPED_PASSES))
    assert set(END_CHECK_SKIPPED_PASSES) <= set(full)
    assert not set(END_CHECK_SKIPPED_PASSES) & set(cut)
    assert [n for n in full if n not in END_CHECK_SKIPPED_PASSES] == cut
    assert "tirx.StorageRewrite" not in full and "tirx.MakePackedAPI" in cut
