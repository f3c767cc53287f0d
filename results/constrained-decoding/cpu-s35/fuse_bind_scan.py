"""Every Fuse followed at once by a Bind in the CUDA split's scripts (completions and start scripts): does the Bind
bind the loop the Fuse made?"""
import json, sys, collections
sys.path.insert(0, "src")  # run from the repository root
from little_dragon.generation.constrained import _decoded
texts = set()
for split in ("train", "validation", "test"):
    p = f".devcarry/cudads/datasets/{split}.jsonl"
    try:
        for line in open(p):
            r = json.loads(line)
            for t in (r.get("completion"), r.get("start_script")):
                if t and "cuda" in json.dumps(r.get("target")):
                    texts.add(t)
    except FileNotFoundError:
        pass
c = collections.Counter()
for t in texts:
    try:
        t = t if t.endswith("\n") else t + "\n"
        t = t[:t.rindex("post *")] if "post *" in t else t
        insts = _decoded(t).trace[0]
    except Exception as e:
        c["undecodable"] += 1
        continue
    for a, b in zip(insts, insts[1:]):
        if a[0] == "Fuse" and b[0] == "Bind":
            c["fuse->bind"] += 1
            c["binds the fused loop" if b[1][0] == a[3][0] else "binds another loop"] += 1
        if a[0] == "Fuse" and b[0] != "Bind":
            c["fuse->" + b[0]] += 1
print(len(texts), "scripts", dict(c))
