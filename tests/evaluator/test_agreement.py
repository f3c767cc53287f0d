"""The evaluator agrees with MetaSchedule: measured-valid records of real harvests are judged correct.

Each test here failed on the evaluator before issue 11: CUDA records in the self-contained form raised
``Cannot find annotation key: meta_schedule.cooperative_fetch`` (post-processors run a second time on a
trace that already held their output), and layout-rewritten llvm records came back ``runtime_error:
Mismatched W_global.ndim`` (the weight passed in its original layout to a kernel expecting the transformed
one)."""
from __future__ import annotations

from pathlib import Path

import pytest

from little_dragon.evaluator import agreement

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
REAL_LLVM_DB = REPO / "tests" / "codec" / "data" / "real_llvm_db"   # real llvm harvest: conv2d_nhwc, RewriteLayout
CUDA_HARVEST = REPO / "data" / "harvest"                            # the H200 harvest (dvc pull data.dvc)


@pytest.fixture(scope="module")
def agree_cfg(tmp_path_factory):
    from little_dragon.evaluator.config import EvaluatorConfig

    return EvaluatorConfig(pool_size=2, build_timeout_s=120.0, run_timeout_s=30.0, memory_limit_gb=4.0,
                           cache_path="")


def test_llvm_harvest_records_with_layout_rewrite_are_correct(agree_cfg, timing_cfg, tmp_path):
    """Every sampled measured-valid record of a real llvm harvest, written as the model writes it (`post *`)
    and self-contained: correct, including the kernels whose weight MetaSchedule's RewriteLayout
    pre-transforms; latencies compared with the harvest's."""
    recs = agreement.sample_records(agreement.find_valid_records([REAL_LLVM_DB]), per_workload=3)
    assert len(recs) == 6 and len({r.workload_id for r in recs}) == 2
    for form in agreement.FORMS:
        (rep,) = agreement.check_agreement(recs, form=form, cfg=agree_cfg, timing_cfg=timing_cfg,
                                           journal=tmp_path / form / "records.jsonl")
        assert rep.stop_after == "time"
        assert rep.agreed == rep.records == 6, rep.disagreements
        assert rep.layout_rewrite == 6          # all of these carry a layout-rewrite block
        assert rep.latency_ratio["n"] == 6 and rep.latency_ratio["median"] > 0
    md = agreement.render_markdown([rep])
    assert "| 6 | 6 | 1.0000 |" in md
    png = agreement.plot_latency(tmp_path / "full" / "records.jsonl", tmp_path / "latency.png")
    assert png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.skipif(not CUDA_HARVEST.exists(), reason="data/ not pulled (scripts/run-tests.sh pulls it)")
def test_cuda_harvest_records_verify_and_build_without_a_gpu(agree_cfg, timing_cfg):
    """The H200 harvest's measured-valid records (the fastest two and one random per tuned workload; the
    whole harvest on the GPU: results/evaluator-agreement.md): every one decodes, applies, passes the
    sm_90 post-processors in tuning order and generates CUDA code, in both forms."""
    records = agreement.find_valid_records([CUDA_HARVEST])
    assert len(records) > 500 and {r.target["kind"] for r in records} == {"cuda"}
    recs = agreement.sample_records(records, per_workload=3)
    (post,) = agreement.check_agreement(recs, form="post", stop_after="build", cfg=agree_cfg, timing_cfg=timing_cfg)
    assert post.workloads >= 40
    assert post.agreed == post.records, agreement.render_markdown([post])
    one_each = agreement.sample_records(records, per_workload=1)
    (full,) = agreement.check_agreement(one_each, form="full", stop_after="build", cfg=agree_cfg,
                                        timing_cfg=timing_cfg)
    assert full.agreed == full.records, agreement.render_markdown([full])
    assert full.categories == {"built": full.records}


def test_cli_writes_the_report_and_fails_on_a_disagreement(tmp_path, monkeypatch):
    """``dragon agreement``: exit 0 and the report files when all agree; a record the evaluator cannot
    accept (its post section tampered with) is listed with its cause and the exit status is 1."""
    import json
    import shutil

    db = tmp_path / "db"
    shutil.copytree(REAL_LLVM_DB / sorted(p.name for p in REAL_LLVM_DB.iterdir())[0], db)
    lines = (db / "database_tuning_record.json").read_text().splitlines()
    rec = json.loads(lines[0])
    insts = rec[1][0][0]
    k = next(i for i, inst in enumerate(insts) if inst[0] == "EnterPostproc")
    assert len(insts) > k + 1
    del insts[-1]                                # the post-processors' last instruction, dropped
    (db / "database_tuning_record.json").write_text(json.dumps(rec) + "\n")
    monkeypatch.setenv("DRAGON_NO_MLFLOW", "1")
    code = agreement.main([str(db), "--form", "full", "--pool-size", "1", "--out", str(tmp_path / "out")])
    assert code == 1
    data = json.loads((tmp_path / "out" / "agreement.json").read_text())
    (d,) = data[0]["disagreements"]
    assert d["category"] == "verify_error" and "post-processing section differs" in d["message"]
    assert "line " in d["message"]
    assert (tmp_path / "out" / "agreement.md").read_text().count("verify_error") >= 1


def test_a_run_with_the_same_journal_resumes(agree_cfg, timing_cfg, tmp_path):
    """A time-boxed run on the device must not start over: records already judged in ``records.jsonl`` (same
    form, depth, evaluator version) are not evaluated again, a torn last line is ignored, and the report
    counts old and new records together."""
    import json

    recs = agreement.sample_records(agreement.find_valid_records([REAL_LLVM_DB]), per_workload=2)
    assert len(recs) == 4
    journal = tmp_path / "out" / "records.jsonl"
    (first,) = agreement.check_agreement(recs[:2], form="post", stop_after="build", cfg=agree_cfg,
                                         timing_cfg=timing_cfg, journal=journal)
    assert first.agreed == first.records == 2
    rows = [json.loads(x) for x in journal.read_text().splitlines()]
    assert [r["category"] for r in rows] == ["built", "built"]
    with journal.open("a") as f:
        f.write('{"key": ["torn')                    # a kill in the middle of a write
    (second,) = agreement.check_agreement(recs, form="post", stop_after="build", cfg=agree_cfg,
                                          timing_cfg=timing_cfg, journal=journal)
    assert second.agreed == second.records == 4 and second.workloads == 2
    lines = journal.read_text().splitlines()
    new = [json.loads(x) for x in lines[3:]]
    assert len(new) == 2 and {tuple(r["key"]) for r in new} == {(r.source, r.workload_id, r.trial) for r in recs[2:]}
    # another form is judged anew, not taken from this journal
    assert agreement.read_journal(journal, "full") == {}


def test_a_torn_journal_is_told_by_its_last_byte(tmp_path):
    """``ends_inside_a_line``: missing or empty is not torn; a last byte other than a newline is."""
    journal = tmp_path / "records.jsonl"
    assert not agreement.ends_inside_a_line(journal)
    journal.write_text("")
    assert not agreement.ends_inside_a_line(journal)
    journal.write_text('{"key": 1}\n')
    assert not agreement.ends_inside_a_line(journal)
    journal.write_text('{"key": 1}\n{"key": ["torn')
    assert agreement.ends_inside_a_line(journal)


def test_tensor_intrinsics_register_with_the_light_stack():
    """import_tensor_intrinsics registers the wmma intrinsics (the tensor-core records above need them) and
    leaves inspect.stack as it was."""
    import inspect

    from little_dragon.tvmx.build import import_tensor_intrinsics

    before = inspect.stack
    import_tensor_intrinsics()
    import_tensor_intrinsics()        # once per process
    from tvm.s_tir import TensorIntrin

    assert TensorIntrin.get("wmma_sync_16x16x16_f16f16f32") is not None
    assert inspect.stack is before
