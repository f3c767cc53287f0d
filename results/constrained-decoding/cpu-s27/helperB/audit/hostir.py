"""Host-code refusals of H200 attempts: build each (nvcc, LLVM on this CPU) and count float loads/stores left in the
optimized host LLVM IR (a host that touches device memory segfaults; none left: the host loop was optimized away)."""
import sys, re, glob; sys.path.insert(0, __import__('os').path.dirname(__import__('os').path.abspath(__file__)))
from common import *
from little_dragon.tvmx.build import fast_build
rows = []
for P in sorted(glob.glob('results/constrained-decoding/h200-s*/**/attempts.parquet', recursive=True)):
    a = pd.read_parquet(P)
    for r in a[(a.method == 'model') & a.category.isin(['runtime_error', 'correct'])].itertuples():
        if not isinstance(r.script, str) or 'post' not in r.script or r.workload_id not in W.index: continue
        rows.append((P, r))
seen = set(); n = 0
for P, r in rows:
    key = (r.workload_id, r.script)
    if key in seen: continue
    seen.add(key)
    try:
        mod, ctx, sch = scheduled(r.workload_id, r.script)
        v = finish_check(mod, ctx, end_text(r.script))
    except Exception:
        continue
    if not v.startswith('host code'): continue
    try:
        ll = fast_build(sch.mod, as_target(SM90)).inspect_source('ll')
        fl = len(re.findall(r'(load|store) (float|half|<\d+ x float>)', ll)) + len(re.findall(r'store (float|half)', ll))
        m = re.search(r'define[^\n]*@__tvm_ffi_main[\s\S]*?\n}\n', ll)
        body = m.group(0) if m else ''
        hl = len(re.findall(r'= load (float|half|<)', body)) + len(re.findall(r'store (float|half|<)', body))
        loops = len(re.findall(r'^for_body[\w.]*:', ll, re.M))
        mem = len(re.findall(r'call void @llvm\.mem(cpy|move)', ll))
        print(P.split('constrained-decoding/')[1], r.prompt_id, r.attempt, r.category, r.family, '| host loop bodies left:', loops, '| memcpy/memmove:', mem, '| float loads/stores:', fl, '|', v[:60], flush=True)
    except Exception as e:
        print(P, r.prompt_id, r.attempt, r.category, 'BUILD FAIL', str(e)[-150:].replace('\n', ' '), flush=True)
    n += 1
