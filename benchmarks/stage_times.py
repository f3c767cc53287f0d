"""Per-stage wall and CPU time of a running pipeline, with the machine's load beside each number.

Polls ``/proc`` every second; for each ``dragon`` stage process (one per DVC stage) it records the wall time
and the CPU time of its whole process tree (its own, its live children's, and what it has reaped: builder and
runner workers, the evaluator pool, the temporary Prefect server), and the 1-minute load average at every
sample.  On a shared machine the CPU time of a single-threaded stage is its load-independent estimate of the
free-machine wall time.  One JSON line per finished stage process:

    python benchmarks/stage_times.py --out /tmp/stages.jsonl &      # then: make pipeline (any clone)
    python benchmarks/stage_times.py --table /tmp/stages.jsonl --cwd /tmp/pipe6

Used for results/pipeline-cpu.md (session 6).  Only Linux; reads nothing but ``/proc``.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and its reaped children)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2:].split()
    return int(rest[1]), sum(int(x) for x in rest[11:15]) / TICK


def _cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def poll(out: Path, every_s: float = 1.0) -> None:
    seen: dict[int, dict] = {}
    while True:
        load = float(Path("/proc/loadavg").read_text().split()[0])
        now = time.time()
        procs = {int(d): s for d in os.listdir("/proc") if d.isdigit() and (s := _stat(int(d))) is not None}
        kids: dict[int, list[int]] = {}
        for pid, (ppid, _) in procs.items():
            kids.setdefault(ppid, []).append(pid)
        for pid in procs:
            cl = _cmdline(pid)
            if len(cl) < 2 or not cl[1].endswith(b"/bin/dragon") or (pid in seen and not seen[pid]["open"]):
                continue
            if pid not in seen:
                try:
                    cwd = os.readlink(f"/proc/{pid}/cwd")
                except OSError:
                    continue
                seen[pid] = {"cmd": " ".join(c.decode() for c in cl[2:] if c), "start": now, "cwd": cwd,
                             "loads": [], "open": True, "cpu_s": 0.0}
            total, stack = 0.0, [pid]
            while stack:
                p = stack.pop()
                total += procs.get(p, (0, 0.0))[1]
                stack.extend(kids.get(p, []))
            rec = seen[pid]
            rec["cpu_s"], rec["end"] = max(rec["cpu_s"], total), now
            rec["loads"].append(load)
        for pid, rec in seen.items():
            if rec["open"] and pid not in procs:
                rec["open"] = False
                loads = rec.pop("loads")
                row = {"cmd": rec["cmd"], "cwd": rec["cwd"], "wall_s": round(rec["end"] - rec["start"], 1),
                       "cpu_s": round(rec["cpu_s"], 1), "load_mean": round(sum(loads) / len(loads), 2),
                       "load_min": min(loads), "load_max": max(loads),
                       "start": time.strftime("%H:%M:%S", time.localtime(rec["start"]))}
                with out.open("a") as f:
                    f.write(json.dumps(row) + "\n")
        time.sleep(every_s)


def table(path: Path, cwd: str | None) -> str:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if cwd is None or r["cwd"] == cwd]
    lines = ["| stage command | start | wall s | CPU s | load 1-min mean (min-max) |", "|---|---|---:|---:|---|"]
    for r in rows:
        lines.append(f"| `dragon {r['cmd'][:70]}` | {r['start']} | {r['wall_s']:.0f} | {r['cpu_s']:.0f} | "
                     f"{r['load_mean']:.1f} ({r['load_min']:.1f}-{r['load_max']:.1f}) |")
    lines.append(f"| sum | | {sum(r['wall_s'] for r in rows):.0f} | {sum(r['cpu_s'] for r in rows):.0f} | |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="poll until killed, appending one JSON line per finished stage")
    ap.add_argument("--table", type=Path, help="print a markdown table of a --out file")
    ap.add_argument("--cwd", help="with --table: only the stages run in this folder (one clone)")
    args = ap.parse_args()
    if args.table:
        print(table(args.table, args.cwd))
        return 0
    if not args.out:
        ap.error("--out or --table")
    poll(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
