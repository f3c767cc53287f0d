"""reindex of a reduction's accumulator read (read index 0) on the update block of a blockized reduction: the
accumulation goes to a fresh buffer with a copy-in and no copy-out; the output keeps its init value."""
import numpy as np, tvm
from tvm import te, s_tir
N, K = 8, 16
A = te.placeholder((N, K), "float32", name="A")
k = te.reduce_axis((0, K), name="k")
S = te.compute((N,), lambda i: te.max(A[i, k], axis=k), name="S")
mod = tvm.IRModule({"main": te.create_prim_func([A, S])})
for blockize in (False, True):
    sch = s_tir.Schedule(mod)
    b = sch.get_sblock("S")
    if blockize:
        sch.blockize(sch.get_loops(b)[0])
    try:
        sch.reindex(b, ("read", 0))
    except Exception as e:
        print("blockize", blockize, "reindex refused:", str(e).strip().splitlines()[-1][:200]); continue
    print(sch.mod["main"].script().split('# with T.sblock("root"):')[1])
    f = tvm.tirx.build(sch.mod, target="llvm")
    a = np.random.rand(N, K).astype("float32"); s = np.full(N, np.nan, "float32")
    ta, ts = tvm.runtime.tensor(a), tvm.runtime.tensor(s); f(ta, ts)
    print("blockize", blockize, "got", ts.numpy()[:3], "expected", a.max(1)[:3])
