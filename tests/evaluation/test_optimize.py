"""``dragon optimize``: one-line errors for a bad kernel and a bad target (the end-to-end run on a kernel file
lives in test_evaluation_stage.py, beside the trained test model)."""
from __future__ import annotations


KERNEL = '''# a user's kernel: C = A @ B, 32x32 float32
from tvm.script import ir as I
from tvm.script import tirx as T


@I.ir_module
class Module:
    @T.prim_func(s_tir=True)
    def main(A: T.Buffer((32, 32), "float32"), B: T.Buffer((32, 32), "float32"), C: T.Buffer((32, 32), "float32")):
        T.func_attr({"global_symbol": "main", "tirx.noalias": True})
        for i, j, k in T.grid(32, 32, 32):
            with T.sblock("C"):
                vi, vj, vk = T.axis.remap("SSR", [i, j, k])
                with T.init():
                    C[vi, vj] = T.float32(0)
                C[vi, vj] = C[vi, vj] + A[vi, vk] * B[vk, vj]
'''


def test_optimize_cli_one_line_errors(tmp_path, capsys):
    from little_dragon.cli import main

    bad = tmp_path / "broken.py"
    bad.write_text("this is not tvmscript(\n")
    assert main(["optimize", str(bad), "--model", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "broken.py" in err and "does not parse" in err
    good = tmp_path / "k.py"
    good.write_text(KERNEL)
    assert main(["optimize", str(good), "--target", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cuda" in err and "no CUDA device" in err
    assert main(["optimize", str(good), "--target", "tpu9000"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "tpu9000" in err
    assert main(["optimize", str(tmp_path / "missing.py")]) == 2
    assert "missing.py" in capsys.readouterr().err
