"""Shared helpers for the audit: an attempt's kernel applied with `post *`, lowered for sm_90."""
import json
import pandas as pd
import tvm
from little_dragon.workloads.store import module_from_script
from little_dragon.codec import PostprocContext
from little_dragon.codec.apply import apply
from little_dragon.generation.schedule_worker import fresh_schedule, END_CHECK_SKIPPED_PASSES, finish_check
from little_dragon.tvmx.build import import_tensor_intrinsics, lower_for_target
from little_dragon.tvmx.postprocs import as_target
import_tensor_intrinsics()
SM90 = '{"arch": "sm_90", "kind": "cuda", "max_shared_memory_per_block": 49152, "max_threads_per_block": 1024, "thread_warp_size": 32}'
W = pd.read_parquet('/work/main/.devcarry/cudads/sealed/workloads.parquet').set_index('workload_id')


def attempt(path, prompt, att, method='model'):
    a = pd.read_parquet(path)
    return a[(a.prompt_id == prompt) & (a.attempt == att) & (a.method == method)].iloc[0]


def end_text(script):
    lines = script.rstrip('\n').split('\n'); kws = [l.split(' ')[0] for l in lines]
    if 'post' in kws: lines = lines[:kws.index('post')] + ['post *']
    return '\n'.join(lines) + '\n'


def scheduled(wid, script, target=SM90):
    mod = module_from_script(W.loc[wid, 'tvmscript'])
    ctx = PostprocContext(mod, target)
    sch = fresh_schedule(mod)
    apply(end_text(script), sch, ctx)
    return mod, ctx, sch
