"""Session 33: which stored attempts (every attempts.parquet under results/, and those inside the sealed archives) break
the annotation-key and move-once rules (grammar_line.ANNOTATION_PLACES, CATEGORICAL_KEYS; no key again on a block, no
block moved twice), correct ones apart, GPU (CUDA) and CPU (paths with "cpu") apart.  Read off the decoded script (the
root block by its `blk root` lookup), before any explicit post section.

    .venv/bin/python results/constrained-decoding/cpu-s33/attempt_rules_sweep.py
"""
import collections
import glob
import tarfile
import tempfile

import pandas as pd

from little_dragon import codec
from little_dragon.generation.grammar_line import ANNOTATION_PLACES, CATEGORICAL_KEYS


def violations(script: str, cpu: bool) -> list[str]:
    try:
        insts = codec.decode(script, codec.SyntaxOnlyContext())[0]
    except Exception:  # noqa: BLE001 - undecodable: no rule to check
        return []
    out, root, sampled, moved = [], set(), set(), set()
    carried = collections.defaultdict(set)
    for kind, ins, attrs, outs in insts:
        if kind == "EnterPostproc":
            break
        if kind == "GetSBlock" and attrs and attrs[0] == "root":
            root.update(outs)
        if kind == "SampleCategorical":
            sampled.update(outs)
        if kind in ("ComputeAt", "ReverseComputeAt"):
            if ins[0] in moved:
                out.append("moved twice")
            moved.add(ins[0])
        if kind == "Annotate":
            obj, key = ins[0], attrs[0]
            where = "loop" if obj.startswith("l") else ("root" if obj in root else "block")
            place = ANNOTATION_PLACES.get(key)
            if place is None:
                out.append("unknown key")
                continue
            if where not in place[0]:
                out.append(f"{key} on {where}")
            if ("cpu" if cpu else "gpu") not in place[1]:
                out.append(f"{key} target")
            if len(ins) > 1 and isinstance(ins[1], str) and ins[1] in sampled and key not in CATEGORICAL_KEYS:
                out.append(f"{key} cat")
            if where != "loop" and key in carried[obj]:
                out.append(f"{key} again")
            carried[obj].add(key)
    return out


def main() -> None:
    tmp = tempfile.mkdtemp()
    files = glob.glob("results/**/attempts.parquet", recursive=True)
    for i, t in enumerate(glob.glob("results/**/*.tar.gz", recursive=True)):
        with tarfile.open(t) as tf:
            tf.extractall(f"{tmp}/{i}", filter="data")
        files += [(f, t) for f in glob.glob(f"{tmp}/{i}/**/attempts.parquet", recursive=True)]
    counts, kinds = collections.Counter(), collections.Counter()
    for f in files:
        path, origin = (f if isinstance(f, tuple) else (f, f))
        cpu = "cpu" in origin
        a = pd.read_parquet(path)
        a = a[a["method"] == "model"] if "method" in a else a
        if "script" not in a or "category" not in a:
            continue
        for _, r in a.iterrows():
            if not isinstance(r["script"], str):
                continue
            v = set(violations(r["script"], cpu))
            ok = r["category"] == "correct"
            counts[("cpu" if cpu else "gpu", "correct" if ok else "other", "breaks a rule" if v else "keeps them")] += 1
            for x in v:
                kinds[("cpu" if cpu else "gpu", "correct" if ok else "other", x)] += 1
    print(len(files), "attempt files")
    for k, n in sorted(counts.items()):
        print(k, n)
    for k, n in kinds.most_common(25):
        print(k, n)


if __name__ == "__main__":
    main()
