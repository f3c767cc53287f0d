"""Milliseconds per line of the constraint's TVM work: ``schedule_worker.prefix_facts`` (apply the line to the prefix's
live schedule, read the facts the next line grammar needs) on every prefix of real MetaSchedule records, in this
process (no worker round trip), warm TVM, caches emptied before each timed run.

Compare two revisions by running it on each, alternating (the machine's speed drifts): ``--save FILE`` on the first
writes every prefix's facts, ``--check FILE`` on the second says whether they are equal (a speed-up must not change
them).

    python benchmarks/prefix_facts_bench.py --harvest data/harvest/cuda-sm_90-6e5dd8 --workloads 24 --save /tmp/f.pkl
"""
from __future__ import annotations

import argparse
import dataclasses
import pickle
import time
from pathlib import Path


def records(harvest: Path, workloads: int, per_workload: int) -> list[tuple]:
    from little_dragon.codec.roundtrip import read_database

    dbs = sorted(p for p in (harvest / "db").iterdir() if p.is_dir())[:workloads]
    return [(name, mod, tj) for db in dbs for name, mod, recs in read_database(db) for _, tj, _ in recs[:per_workload]]


def run(work: list[tuple], keep: list | None) -> int:
    from little_dragon import codec
    from little_dragon.generation import constrained

    n = 0
    for name, mod, tj in work:
        lines = codec.encode(tj).splitlines()
        if "post" in lines:
            lines = lines[:lines.index("post")]
        for i in range(1, len(lines) + 1):
            text = "\n".join(lines[:i]) + "\n"
            try:
                state = constrained._prefix_state(mod, text, (name, "bench"))
                if keep is not None:
                    keep.append(dataclasses.asdict(state))
            except Exception as e:  # noqa: BLE001 - TVM's refusal is a fact too
                if keep is not None:
                    keep.append(f"{type(e).__name__}: {e}")
            n += 1
    return n


def main(args: argparse.Namespace) -> None:
    from little_dragon.generation import schedule_worker
    from little_dragon.tvmx.build import import_tensor_intrinsics

    import_tensor_intrinsics()
    work = records(Path(args.harvest), args.workloads, args.per_workload)
    facts: list = []
    run(work, facts)  # warm: TVM's first calls, the codec's parser
    times = []
    for _ in range(args.repeat):
        schedule_worker._LIVE.data.clear()  # every line applied again (the codec's decodes stay cached: the caller's)
        t0 = time.perf_counter()
        n = run(work, None)
        times.append((time.perf_counter() - t0) / n * 1e3)
    print(f"{len(work)} records, {n} lines: ms per line {' '.join(f'{t:.2f}' for t in times)} "
          f"(min {min(times):.2f})")
    if args.save:
        Path(args.save).write_bytes(pickle.dumps(facts))
    if args.check:
        print("facts equal to", args.check, ":", pickle.loads(Path(args.check).read_bytes()) == facts)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--harvest", required=True, help="a harvest folder (its db/ holds one MetaSchedule database a workload)")
    ap.add_argument("--workloads", type=int, default=12, help="the first N workloads' databases")
    ap.add_argument("--per-workload", type=int, default=2, help="records of each")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs")
    ap.add_argument("--save", help="write every prefix's facts here (pickle)")
    ap.add_argument("--check", help="compare every prefix's facts with an earlier --save")
    return ap


if __name__ == "__main__":
    main(parser().parse_args())
