"""Blockize drops a block predicate that DetectIterMap absorbs: two TE reproductions of the s27 cases (e809 and 414df).
Each: build, run against numpy, print the inner block after blockize."""
import numpy as np, tvm
from tvm import te, s_tir
N, K = 8, 256
A = te.placeholder((N, K), "float32", name="A")
k = te.reduce_axis((0, K), name="k")
S = te.compute((N,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="S")
mod = tvm.IRModule({"main": te.create_prim_func([A, S])})

def run(sch, label):
    f = tvm.tirx.build(sch.mod, target="llvm")
    a = np.random.rand(N, K).astype("float32"); s = np.full(N, np.nan, "float32")
    ta, ts = tvm.runtime.tensor(a), tvm.runtime.tensor(s); f(ta, ts)
    exp = (a * a).sum(1)
    print(f"{label}: got/expected row0 {ts.numpy()[0]:.4g}/{exp[0]:.4g}  ratio {ts.numpy()[0]/exp[0]:.4g}")

def case_unused_loop(do_blockize):   # e809: a unit loop split by 256 -> where(u0*256+u1 < 1), u not in any binding
    sch = s_tir.Schedule(mod)
    b = sch.get_sblock("S")
    i, kk = sch.get_loops(b)
    u = sch.add_unit_loop(kk)         # (i, u=1, k)
    i, u, kk = sch.get_loops(b)
    sch.split(u, [None, 256])         # (i, 1, 256, k) with T.where(u_0 * 256 + u_1 < 1)
    if do_blockize:
        sch.blockize(sch.get_loops(b)[0])
    return sch

def case_fused_pred(do_blockize):    # 414df: k -> (4, 64); k0 -> (1, 64) pred < 4; fuse(k0_1, k1) = 4096 with pred //64 < 4
    sch = s_tir.Schedule(mod)
    b = sch.get_sblock("S")
    i, kk = sch.get_loops(b)
    k0, k1 = sch.split(kk, [None, 64])
    k00, k01 = sch.split(k0, [None, 64])
    sch.fuse(k01, k1)
    if do_blockize:
        sch.blockize(sch.get_loops(b)[0])
    return sch

for case in (case_unused_loop, case_fused_pred):
    for bz in (False, True):
        sch = case(bz)
        if bz:
            print(f"--- {case.__name__} after blockize:"); print(sch.mod["main"].script().split("# with T.sblock(\"root\"):")[1])
        run(sch, f"{case.__name__} blockize={bz}")
