import json, pathlib, shutil
root = pathlib.Path('data/harvest/cuda-sm_90-6e5dd8/db'); out = pathlib.Path('/tmp/h32db'); shutil.rmtree(out, ignore_errors=True)
TK = "meta_schedule.tiling_structure"
n = 0
for d in sorted(root.iterdir()):
    keep = []
    for ln in open(d / 'database_tuning_record.json'):
        insts = json.loads(ln)[1][0][0]
        if any(i + 2 < len(insts) and x[0] == "Annotate" and x[2] == [TK] and insts[i+1][0] == "GetLoops"
               and insts[i+2][0] == "SamplePerfectTile" for i, x in enumerate(insts)):
            keep.append(ln)
    if keep:
        (out / d.name).mkdir(parents=True)
        shutil.copy(d / 'database_workload.json', out / d.name)
        (out / d.name / 'database_tuning_record.json').write_text("".join(keep))
        n += len(keep)
print(n, len(list(out.iterdir())))
