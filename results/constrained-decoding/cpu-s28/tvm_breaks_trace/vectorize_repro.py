"""A row sum computed at its consumer's row loop, that loop vectorized: the sum's buffer is compacted to one element
inside the vectorized loop and VectorizeLoop writes all lanes to it (X[Broadcast(0, n)] = vector)."""
import numpy as np, tvm
from tvm import te, s_tir
N, K = 16, 32
A = te.placeholder((N, K), "float32", name="A")
k = te.reduce_axis((0, K), name="k")
S = te.compute((N,), lambda i: te.sum(A[i, k], axis=k), name="S")
R = te.compute((N,), lambda i: S[i] * 2.0, name="R")
mod = tvm.IRModule({"main": te.create_prim_func([A, R])})
for vec in (False, True):
    sch = s_tir.Schedule(mod)
    (i,) = sch.get_loops(sch.get_sblock("R"))
    sch.compute_at(sch.get_sblock("S"), i)
    if vec:
        sch.vectorize(i)
    f = tvm.tirx.build(sch.mod, target="llvm")
    a = np.random.rand(N, K).astype("float32"); r = np.full(N, np.nan, "float32")
    ta, tr = tvm.runtime.tensor(a), tvm.runtime.tensor(r); f(ta, tr)
    print("vectorize", vec, "max err", np.abs(tr.numpy() - 2 * a.sum(1)).max())
    if vec:
        print(sch.mod["main"].script().split('# with T.sblock("root"):')[1])
        t = tvm.target.Target("llvm"); m = tvm.tirx.transform.BindTarget(t.with_host(t))(sch.mod)
        low = tvm.tirx.get_default_tir_pipeline(t.with_host(t))[0](m).script()
        print('\n'.join(l for l in low.splitlines() if 'S[' in l or 'S = ' in l))
