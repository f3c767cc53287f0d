"""Session 26's out_of_bounds_accesses (device_bounds_s26.py) against the current one on the H200 harvest's lowered
device modules that ``collect.py`` saved (832 calls, the end check's own lowering of each record), one process, the
two alternating which runs first; also the current walk with no budget (``t_unl``: the cheaper order alone) and the
steps it spends.  python bench.py OUT.pkl (after collect.py)."""
import os, pickle, sys, time, statistics, json
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tvm
import device_bounds_s26 as old
from little_dragon.generation import device_bounds as new
rows = pickle.load(open('/tmp/hB/before_rows.pkl', 'rb'))
out = []
for r in rows:
    if not r.get('dev'):
        continue
    devs = [tvm.ir.load_json(j) for j in pickle.load(open(r['dev'], 'rb'))]
    if len(out) % 2:
        t = time.perf_counter(); b = new.out_of_bounds_accesses(devs); t_new = time.perf_counter() - t
        t = time.perf_counter(); a = old.out_of_bounds_accesses(devs); t_old = time.perf_counter() - t
    else:
        t = time.perf_counter(); a = old.out_of_bounds_accesses(devs); t_old = time.perf_counter() - t
        t = time.perf_counter(); b = new.out_of_bounds_accesses(devs); t_new = time.perf_counter() - t
    saved = new.BUDGET; new.BUDGET = 10 ** 9
    spent = {}
    orig = new._Budget.__init__
    def init(self, q, _o=orig): _o(self, q); spent['b'] = self
    new._Budget.__init__ = init
    t = time.perf_counter(); c = new.out_of_bounds_accesses(devs); t_unl = time.perf_counter() - t
    new._Budget.__init__ = orig; new.BUDGET = saved
    out.append(dict(where=r['where'], valid=r['valid'], old=a, new=b, unl=c, t_old=t_old, t_new=t_new, t_unl=t_unl,
                    queries=10 ** 9 - spent['b'].left))
    if len(out) % 100 == 0: print(len(out), flush=True)
pickle.dump(out, open(sys.argv[1] if len(sys.argv) > 1 else '/tmp/hB/bench.pkl', 'wb'))
def stats(k):
    t = sorted(x[k] for x in out); n = len(t)
    return f"mean {1e3*statistics.mean(t):.1f} median {1e3*statistics.median(t):.1f} p99 {1e3*t[int(0.99*(n-1))]:.0f} max {1e3*t[-1]:.0f} ms"
for k in ('t_old', 't_new', 't_unl'): print(k, stats(k))
print('old!=new', sum(x['old'] != x['new'] for x in out), 'old!=unl', sum(x['old'] != x['unl'] for x in out),
      'refused old/new', sum(bool(x['old']) for x in out), sum(bool(x['new']) for x in out), 'over budget', dict(new.OVER_BUDGET))
q = sorted(x['queries'] for x in out); print('steps (no budget) median', statistics.median(q), 'p99', q[int(0.99*(len(q)-1))], 'max', q[-1])
