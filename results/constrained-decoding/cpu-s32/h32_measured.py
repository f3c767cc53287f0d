"""Join the --harvest progress lines with whether MetaSchedule measured each record (finite run_secs)."""
import json, pathlib, collections, sys
db = pathlib.Path(sys.argv[1]); files = sys.argv[2:]
ran = {}
for d in db.iterdir():
    for i, ln in enumerate(open(d / 'database_tuning_record.json')):
        ran[(d.name, i)] = all(float(x) < 1e9 for x in json.loads(ln)[1][1])
c = collections.Counter()
for f in files:
    for ln in open(f):
        r = json.loads(ln)
        key = (pathlib.Path(r['db']).name, r['record'])
        why = r['why'].split(':')[0] if r['why'] else ''
        c[('measured' if ran[key] else 'failed in tuning', 'accepted' if r['ok'] else 'refused at ' + why)] += 1
for k, v in sorted(c.items()): print(k, v)
