import json, collections
import pandas as pd
r = pd.read_parquet('data/harvest/cuda-sm_90-6e5dd8/records.parquet')
TK = "meta_schedule.tiling_structure"
stats = collections.Counter(); bad = []
for _, row in r.iterrows():
    tr = json.loads(row.trace_json)
    insts = tr[0]; decs = {d[0]: d[1] for d in tr[1]}
    structure = None
    for i, inst in enumerate(insts):
        if inst[0] == "Annotate" and inst[2] == [TK]:
            structure = json.loads(inst[1][1])
        if inst[0] == "GetLoops" and i + 1 < len(insts) and insts[i+1][0] == "SamplePerfectTile":
            blk = inst[1][0]
            warp = any(x[0] == "Annotate" and x[1][:1] == [blk] and x[2] == ["warp_execution"] for x in insts[:i])
            j = i + 1; facs = []
            while j + 1 < len(insts) and insts[j][0] == "SamplePerfectTile" and insts[j+1][0] == "Split":
                facs.append(decs.get(j)); j += 2
            ns = [len(f) for f in facs]
            stats[(structure, warp, tuple(ns))] += 1
            if structure != "SSSRRSRS": continue
            th = 1
            for f in facs:
                if len(f) == 5: th *= f[2]
            tot = th * (32 if warp else 1)
            ok = 32 <= tot <= 1024
            stats[("ok" if ok else "out", bool(row.valid))] += 1
            if not ok and row.valid: bad.append((row.workload_id, facs, warp, tot))
for k, v in sorted(stats.items(), key=str): print(k, v)
print(len(bad), bad[:5])
