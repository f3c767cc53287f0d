import sys, tvm
from tvm import te, s_tir
sys.path.insert(0, 'tests')
from dragon_testkit import prim_module
from little_dragon.generation.constrain_state import nested_thread_bindings
from little_dragon.tvmx.build import lower_for_target
H200 = {"arch": "sm_90", "kind": "cuda", "max_shared_memory_per_block": 49152, "max_threads_per_block": 1024,
        "thread_warp_size": 32}
N = 64
def mod_():
    a = te.placeholder((N, N), name="A")
    return prim_module([a, te.compute((N, N), lambda i, j: a[i, j] * 2.0, name="B")])

def sched(case, bind=True):
    sch = s_tir.Schedule(mod_())
    b = sch.get_sblock("B")
    i, j = sch.get_loops(b)
    bx, i = sch.split(i, [4, None]); tx, j = sch.split(j, [4, None])  # i, j: 16 each
    sch.reorder(bx, tx, i, j); sch.bind(bx, "blockIdx.x"); sch.bind(tx, "threadIdx.x")
    ax = "vthread.x" if bind else None
    pairs = []
    if case == "16in16":
        pairs = [i, j]
    elif case == "1in1":
        i0, i1 = sch.split(i, [None, 1]); j0, j1 = sch.split(j, [None, 1]); sch.reorder(i0, j0, i1, j1); pairs = [i1, j1]
    elif case == "1in1_outer":
        i0, i1 = sch.split(i, [1, None]); j0, j1 = sch.split(j, [1, None]); sch.reorder(i0, j0, i1, j1); pairs = [i0, j0]
    elif case == "1in16":
        j0, j1 = sch.split(j, [None, 1]); pairs = [i, j1]
    elif case == "16in1":
        i0, i1 = sch.split(i, [1, None]); pairs = [i0, j]
    if bind:
        for l in pairs: sch.bind(l, ax)
    return sch

def dev(sch):
    try:
        host, devs = lower_for_target(sch.mod, tvm.target.Target(H200))
        return "\n".join(d.script() for d in devs).split('T.func_attr')[1].split("\n", 1)[1]
    except Exception as e:
        return "ERROR " + str(e).strip().splitlines()[-1][:300]

for case in (sys.argv[1:] or ["16in16", "1in1", "1in1_outer", "1in16", "16in1"]):
    print("=" * 20, case)
    s1 = sched(case); s0 = sched(case, bind=False)
    print(s1.mod.script().split('# with T.sblock("root"):')[-1])
    print("nested:", nested_thread_bindings(s1))
    d1, d0 = dev(s1), dev(s0)
    print("--- cuda device TIR, bound:\n" + d1)
    print("--- same as without the vthread bindings:", d1 == d0)
    if d1 != d0: print("--- unbound:\n" + d0)
