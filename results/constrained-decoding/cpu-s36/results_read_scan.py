"""Over real scripts: for each instruction defining variables, lines until one of its outputs is first read."""
import json, sys, collections
from little_dragon.codec.script import decode_with_lines

def flat(x):
    if isinstance(x, str): yield x
    elif isinstance(x, list):
        for y in x: yield from flat(y)

def scan(text):
    text = "\n".join(l for l in text.splitlines() if not l.startswith("post")) + "\n"
    (insts, _decisions), lines = decode_with_lines(text)
    out = []
    n = len(insts)
    for i, ins in enumerate(insts):
        kind, inputs, attrs, outs = ins[0], ins[1], ins[2], ins[3]
        outs = [o for o in outs if isinstance(o, str)]
        if not outs: continue
        first = None
        for j in range(i + 1, n):
            used = set(flat(insts[j][1])) | set(v for v in flat(insts[j][2]) if isinstance(v, str))
            if used & set(outs):
                first = j; break
        out.append((kind, None if first is None else lines[first] - lines[i], lines[i]))
    return out

dist = collections.defaultdict(collections.Counter)
never = collections.Counter()
ex = {}
for f in sys.argv[1:]:
    for row in map(json.loads, open(f)):
        for key in ("completion", "start_script"):
            t = row.get(key)
            if not t: continue
            try:
                res = scan(t)
            except Exception as e:
                print("ERR", e, file=sys.stderr); continue
            for kind, d, ln in res:
                if d is None:
                    never[kind] += 1; ex.setdefault(kind, (t, ln))
                else:
                    dist[kind][d] += 1
for k, c in sorted(dist.items()):
    print(k, "max", max(c), "n", sum(c.values()), sorted(c.items())[:12])
print("never read:", dict(never))
for k, (t, ln) in ex.items():
    print("==", k, ln); print("\n".join(t.splitlines()[max(0, ln-3):ln+3]))
