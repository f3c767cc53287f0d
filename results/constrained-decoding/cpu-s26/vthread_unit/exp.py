import sys, numpy as np, tvm
from tvm import te, s_tir
sys.path.insert(0, 'tests')
from dragon_testkit import prim_module
from little_dragon.generation.constrain_state import nested_thread_bindings
from little_dragon.tvmx.build import lower_for_target

N = 16
def mod_():
    a = te.placeholder((N, N), name="A")
    return prim_module([a, te.compute((N, N), lambda i, j: a[i, j] * 2.0, name="B")])

def sched(case, cuda=False):
    sch = s_tir.Schedule(mod_())
    b = sch.get_sblock("B")
    i, j = sch.get_loops(b)
    if cuda:
        bx, i = sch.split(i, [4, None])  # i: 4
        sch.bind(bx, "blockIdx.x")
    if case == "64in64":
        sch.bind(i, "vthread.x"); sch.bind(j, "vthread.x")
    elif case == "1in1":
        i0, i1 = sch.split(i, [None, 1]); j0, j1 = sch.split(j, [None, 1])
        sch.reorder(i0, j0, i1, j1); sch.bind(i1, "vthread.x"); sch.bind(j1, "vthread.x")
    elif case == "1in64":
        sch.bind(i, "vthread.x"); j0, j1 = sch.split(j, [None, 1]); sch.bind(j1, "vthread.x")
    elif case == "64in1":
        i0, i1 = sch.split(i, [1, None]); sch.bind(i0, "vthread.x"); sch.bind(j, "vthread.x")
    elif case == "1in1_outer":  # both extent-1 loops outermost, the data loops inside
        i0, i1 = sch.split(i, [1, None]); j0, j1 = sch.split(j, [1, None])
        sch.reorder(i0, j0, i1, j1); sch.bind(i0, "vthread.x"); sch.bind(j0, "vthread.x")
    elif case == "1in1_y":  # control: other axes
        i0, i1 = sch.split(i, [None, 1]); j0, j1 = sch.split(j, [None, 1])
        sch.reorder(i0, j0, i1, j1); sch.bind(i1, "vthread.x"); sch.bind(j1, "vthread.y")
    if cuda:
        loops = sch.get_loops(b)
        sch.bind(loops[-1] if case != "64in64" else loops[-1], "threadIdx.x") if False else None
    return sch

def run_llvm(sch):
    f = tvm.compile(sch.mod, target="llvm")
    x = np.random.default_rng(0).random((N, N), dtype=np.float32)
    out = tvm.runtime.tensor(np.full((N, N), np.nan, np.float32))
    f(tvm.runtime.tensor(x), out)
    o = out.numpy()
    return bool(np.allclose(o, 2 * x)), int(np.isnan(o).sum())

cases = sys.argv[1:] or ["64in64", "1in1", "1in64", "64in1", "1in1_outer", "1in1_y"]
for case in cases:
    print("=" * 20, case)
    sch = sched(case)
    print(sch.mod.script().split('# with T.sblock("root"):')[-1])
    print("nested:", nested_thread_bindings(sch))
    try:
        host, dev = lower_for_target(sch.mod, tvm.target.Target({"kind": "llvm", "num-cores": 2}))
        print("--- llvm lowered:\n", host.script().split('"compute_scope": "main_compute_"}):')[1].split("return 0")[0])
        print("run:", run_llvm(sch))
    except Exception as e:
        print("LLVM ERROR:", str(e).strip().splitlines()[-1][:300])
