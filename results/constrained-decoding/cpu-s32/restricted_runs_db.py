"""The H200 harvest's records with a multi-level tiling run (``grammar_line.tiling_run``: the `loops` of the tiled
block, or of the tensor-core block `blockize` made, right before SamplePerfectTile), one database folder per workload
under OUT: the records the [thread factors] rule acts on (session 32)."""
import json, pathlib, shutil, sys
root = pathlib.Path('data/harvest/cuda-sm_90-6e5dd8/db'); out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else '/tmp/h32db')
shutil.rmtree(out, ignore_errors=True)
TK = "meta_schedule.tiling_structure"
n = 0
for d in sorted(root.iterdir()):
    keep = []
    for ln in open(d / 'database_tuning_record.json'):
        insts = json.loads(ln)[1][0][0]
        if any(x[0] == "Annotate" and x[2] == [TK] for x in insts) and any(
                x[0] == "GetLoops" and i + 1 < len(insts) and insts[i + 1][0] == "SamplePerfectTile"
                for i, x in enumerate(insts)):
            keep.append(ln)
    if keep:
        (out / d.name).mkdir(parents=True)
        shutil.copy(d / 'database_workload.json', out / d.name)
        (out / d.name / 'database_tuning_record.json').write_text("".join(keep))
        n += len(keep)
print(n, len(list(out.iterdir())))
