"""Session 21's untensorized-fragment attempt (rms_norm construction, attempt 1): the scheduled kernel, its lowering,
its CUDA source (TVM, no GPU) and nvcc's verdict for sm_90."""
import sys; sys.path.insert(0, __import__('os').path.dirname(__import__('os').path.abspath(__file__)))
from common import *
from little_dragon.tvmx.build import fast_build
P = 'results/constrained-decoding/h200-s21/sealed-108ffae/constrained-seed0/attempts.parquet'
r = attempt(P, '6cd4e7d6b1bd0b62', 1)
mod, ctx, sch = scheduled(r.workload_id, r.script)
print('END CHECK:', finish_check(mod, ctx, end_text(r.script)))
s = sch.mod.script()
open('/tmp/s21_sched.py', 'w').write(s)
host, devs = lower_for_target(sch.mod, as_target(SM90))
open('/tmp/s21_dev.py', 'w').write('\n'.join(d.script() for d in devs))
try:
    rt = fast_build(sch.mod, as_target(SM90))
    src = rt.imports[0].inspect_source('cu')
    open('/tmp/s21.cu', 'w').write(src)
    print('BUILT, cuda chars', len(src))
except Exception as e:
    print('BUILD FAILED', type(e).__name__, str(e)[-3000:])
print([ (m.kind if hasattr(m,'kind') else type(m)) for m in rt.imports])
for m in rt.imports:
    for fmt in ('', 'cu', 'cuda', 'ptx'):
        try:
            t = m.inspect_source(fmt); print(fmt, len(t))
            if t and fmt in ('', 'cu', 'cuda'): open('/tmp/s21.cu', 'w').write(t)
        except Exception as e: print(fmt, 'ERR', str(e)[:100])
