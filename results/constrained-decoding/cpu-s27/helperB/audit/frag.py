"""For every H200 attempt the end check refuses as an untensorized fragment: is the wmma buffer allocated inside a
lowered device function (a real fragment) or passed in as a kernel parameter (host workspace: a plain float*)?"""
import sys, glob, json, os; sys.path.insert(0, __import__('os').path.dirname(__import__('os').path.abspath(__file__)))
from common import *
from little_dragon.generation import schedule_worker as sw
from little_dragon.generation.constrain_state import blocks_in_run_order, fragment_elements

def allocs(devs):
    found = {}
    def visit(s):
        k = type(s).__name__
        if k == 'AllocBuffer': found[str(s.buffer.name)] = str(s.buffer.scope())
        for f in ('body', 'then_case', 'else_case'):
            x = getattr(s, f, None)
            if x is not None and hasattr(x, 'span'): visit(x)
        if k == 'SeqStmt':
            for x in s.seq: visit(x)
    for d in devs:
        for gv, f in d.functions.items():
            if type(f).__name__ == 'PrimFunc': visit(f.body)
    return found

def params(devs):
    return {str(p.name) for d in devs for gv, f in d.functions.items() if type(f).__name__ == 'PrimFunc' for p in f.params}

files = sorted(f for f in glob.glob('results/**/attempts.parquet', recursive=True) if 'h200' in f)
seen = set()
for f in files:
    a = pd.read_parquet(f)
    for r in a.itertuples():
        if not isinstance(r.script, str) or 'wmma' not in r.script or r.workload_id not in W.index: continue
        key = (r.workload_id, r.script)
        if key in seen: continue
        seen.add(key)
        try:
            mod, ctx, sch = scheduled(r.workload_id, r.script)
        except Exception as e:
            continue
        frag = fragment_elements(sch)
        if not frag: continue
        try:
            host, devs = lower_for_target(sch.mod, as_target(SM90), skip=END_CHECK_SKIPPED_PASSES)
        except Exception as e:
            print('LOWER FAIL', f, r.prompt_id, r.attempt, r.category, str(e)[-100:]); continue
        al = allocs(devs); ps = params(devs)
        name = frag[1]
        print(f, r.prompt_id, r.attempt, r.category, 'fragment', name,
              'allocated in kernel:', name in al, 'kernel param:', any(p.startswith(name) for p in ps), flush=True)
