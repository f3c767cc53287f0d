"""Build session 17's attempt 2 for sm_90 (nvcc on this machine) and read the host's LLVM IR: is the T_cast_1 loop
(a self-copy of B_reindex's storage after StorageRewrite) still there?"""
import sys, re; sys.path.insert(0, __import__('os').path.dirname(__import__('os').path.abspath(__file__)))
from common import *
from little_dragon.tvmx.build import fast_build
P = 'results/constrained-decoding/h200-s17/constrained/eval/attempts.parquet'
r = attempt(P, '6cd4e7d6b1bd0b62', int(sys.argv[1]) if len(sys.argv) > 1 else 2)
mod, ctx, sch = scheduled(r.workload_id, r.script)
rt = fast_build(sch.mod, as_target(SM90))
ll = rt.inspect_source('ll')
open('/tmp/s17_host.ll', 'w').write(ll)
print('host IR chars', len(ll))
fn = ll[ll.find('define'):]
# host function bodies: loops show up as phi nodes / br back-edges
for name in re.findall(r'define [^@]*@([\w.]+)\(', ll): print('fn', name)
print('phi nodes', ll.count(' phi '), 'loads float', len(re.findall(r'load float', ll)), 'store float', len(re.findall(r'store float', ll)), 'load <', ll.count('load <'), 'store <', ll.count('store <'))
print('calls to kernels', re.findall(r'main_kernel_?\d*', ll)[:20])
imp = rt.imports[0] if hasattr(rt, 'imports') else None
