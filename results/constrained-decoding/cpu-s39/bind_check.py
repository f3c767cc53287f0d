"""Session 39: every Bind of every record of a harvest (or one MetaSchedule JSON database folder), replayed instruction
by instruction: is the bound loop outermost (directly under the root block) and data parallel (TVM's GetLoopIterType),
and which axis?  A tally, with an example record of each.  From the repository root:
    .venv/bin/python results/constrained-decoding/cpu-s39/bind_check.py data/harvest/cuda-sm_90-6e5dd8
Output of session 39: bind_check.txt."""
import collections, sys, json
sys.path.insert(0, "src")
from pathlib import Path
from little_dragon.codec.roundtrip import read_database
from tvm.s_tir import Schedule, SBlockRealize
from tvm.s_tir.schedule import Trace
from little_dragon.tvmx.build import import_tensor_intrinsics
import_tensor_intrinsics()
from tvm.tirx import For, SeqStmt, IfThenElse, Stmt, analysis

def iter_type(loop):
    var = hash(loop.loop_var); n = {"S": 0, "R": 0, "X": 0}
    def visit(st):
        if isinstance(st, SBlockRealize):
            for iv, b in zip(st.block.iter_vars, st.iter_values):
                k = int(iv.iter_type); key = "S" if k == 0 else "R" if k == 2 else "X"
                if var in {hash(v) for v in analysis.undefined_vars(b, [])}: n[key] += 1
        elif isinstance(st, SeqStmt):
            for x in st.seq: visit(x)
        elif isinstance(st, IfThenElse):
            visit(st.then_case)
            if st.else_case is not None: visit(st.else_case)
        else:
            b = getattr(st, "body", None)
            if isinstance(b, Stmt): visit(b)
    visit(loop.body)
    return "X" if n["X"] or (n["S"] and n["R"]) else "R" if n["R"] else "S"

tally = collections.Counter(); examples = {}
root = Path(sys.argv[1])
for db in (sorted(p for p in (root / "db").iterdir() if p.is_dir()) if (root / "db").is_dir() else [root]):
    for name, mod, recs in read_database(db):
        for idx, tj, target in recs:
            sch = Schedule(mod)
            Trace.apply_json_to_schedule(tj, sch)
            tr = sch.trace
            s2 = Schedule(mod)
            def cb(inst, inputs, attrs, decision):
                if inst.kind.name == "Bind":
                    sref = s2.get_sref(inputs[0]); parent = sref.parent
                    top = parent is not None and not hasattr(parent.stmt, "loop_var") and parent.parent is None
                    it = iter_type(s2.get(inputs[0]))
                    key = (str(attrs[0]).split(".")[0], "top" if top else "inner", it)
                    tally[key] += 1
                    examples.setdefault(key, f"{name}#{idx}")
                return decision
            tr.apply_to_schedule(s2, remove_postproc=True, decision_provider=cb)
for k, v in sorted(tally.items()):
    print(k, v, examples[k])
