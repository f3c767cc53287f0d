"""``dragon codec``: encode / decode / roundtrip / validate / kinds."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from little_dragon.tvmx.schedule import fresh_schedule


def add_parser(sub) -> None:
    p = sub.add_parser("codec", help="the trace codec: scripts <-> MetaSchedule trace JSON")
    csub = p.add_subparsers(dest="codec_command", required=True, metavar="ACTION")

    e = csub.add_parser("encode", help="print the script of a trace (TVM as_json form)")
    e.add_argument("--trace", required=True, help="JSON file holding [insts, decisions] ('-' = stdin)")
    e.add_argument("--workload", help="with --target: write `post *` when the post-processors re-derive the "
                                      "post-processing exactly (workload id or TVMScript file)")
    e.add_argument("--workloads", help="workloads.parquet holding the workload ids (default: $DRAGON_WORKLOADS, else the store under params workloads.out_dir)")
    e.add_argument("--target", help="target dict (JSON) or llvm / cuda, for `post *`")

    d = csub.add_parser("decode", help="print the trace JSON of a script; with --workload, also apply it")
    d.add_argument("script", help="script file ('-' = stdin)")
    d.add_argument("--workload", help="workload id (from --workloads) or a TVMScript file to apply the script to")
    d.add_argument("--workloads", help="workloads.parquet holding the workload ids (default: $DRAGON_WORKLOADS, else the store under params workloads.out_dir)")
    d.add_argument("--target", help="target dict (JSON) or llvm / cuda: needed by a `post *` line (with --workload)")

    r = csub.add_parser("roundtrip", help="round-trip every record of a MetaSchedule JSON database dir")
    r.add_argument("dir", help="folder with database_workload.json + database_tuning_record.json")
    r.add_argument("--no-structural", action="store_true", help="skip applying scripts to the workloads")
    r.add_argument("--no-derived-post", action="store_true", help="skip checking the `post *` form")

    v = csub.add_parser("validate", help="DVC stage validate_codec: round-trip whole harvests, write a report")
    v.add_argument("--harvest", nargs="+", required=True, help="harvest dirs (each with db/<workload_id>/) or roots of them")
    v.add_argument("--out", required=True, help="report folder (metrics.json, summary.md)")
    from little_dragon.config import add_set_option

    add_set_option(v, "codec")

    k = csub.add_parser("kinds", help="table of TVM instruction kinds and their mnemonics (markdown)")
    k.add_argument("--grammar", action="store_true", help="print the Lark grammar instead")
    p.set_defaults(func=main)


def _read(path: str) -> str:
    from little_dragon.errors import UserError

    if path == "-":
        return sys.stdin.read()
    p = Path(path)
    if not p.is_file():
        raise UserError(f"{path}: no such file")
    return p.read_text()


def load_workload(spec: str, workloads_path: str | None):
    """An IRModule from a TVMScript file path or a workload id in workloads.parquet."""
    from little_dragon.errors import UserError

    p = Path(spec)
    if p.is_file():
        text = p.read_text()
        try:
            from little_dragon.workloads.store import module_from_script
        except ImportError:
            import tvm

            return tvm.script.from_source(text)
        return module_from_script(text)
    from little_dragon.workloads.store import load_workloads, module_from_script, store_path

    workloads_path = str(store_path(workloads_path))
    df = load_workloads(workloads_path)
    rows = df[df["workload_id"] == spec]
    if rows.empty:
        raise UserError(f"{workloads_path}: no workload {spec!r} (and no file of that name)")
    return module_from_script(rows.iloc[0]["tvmscript"])


def _context(args: argparse.Namespace):
    """The ``post *`` context of --workload and --target (None without --target)."""
    from little_dragon.errors import UserError

    if not getattr(args, "target", None):
        return None, (load_workload(args.workload, args.workloads) if args.workload else None)
    if not args.workload:
        raise UserError("--target needs --workload (`post *` is derived from both)")
    from little_dragon.codec.postproc import PostprocContext
    from little_dragon.tvmx.target import normalize

    mod = load_workload(args.workload, args.workloads)
    try:
        target = normalize(args.target)
    except ValueError as e:
        raise UserError(str(e)) from e
    return PostprocContext(mod, target), mod


def main(args: argparse.Namespace) -> int:
    from little_dragon.errors import UserError
    from little_dragon.codec import CodecError, encode
    from little_dragon.codec.script import decode_with_lines

    cmd = args.codec_command
    if cmd == "encode":
        try:
            trace_json = json.loads(_read(args.trace))
        except json.JSONDecodeError as e:
            raise UserError(f"{args.trace}: not JSON: {e}") from e
        context, _ = _context(args)
        try:
            sys.stdout.write(encode(trace_json, context))
        except CodecError as e:
            raise UserError(f"{args.trace}: {e}") from e
        return 0
    if cmd == "decode":
        from little_dragon.codec import ApplyError

        text = _read(args.script)
        context, mod = _context(args)
        try:
            trace_json, lines = decode_with_lines(text, context)
        except ApplyError as e:  # `post *`: the script before it does not fit the workload
            print(f"dragon codec decode: {args.script}: workload {args.workload}: {e}", file=sys.stderr)
            return 1
        except CodecError as e:
            raise UserError(f"{args.script}: {e}") from e
        if mod is not None:
            from little_dragon.codec.apply import apply_json

            if any(i[0] == "Tensorize" for i in trace_json[0]):
                from little_dragon.tvmx.build import import_tensor_intrinsics

                import_tensor_intrinsics()
            try:
                apply_json(trace_json, fresh_schedule(mod), lines, text)
            except CodecError as e:
                print(f"dragon codec decode: {args.script}: workload {args.workload}: {e}", file=sys.stderr)
                return 1
        print(json.dumps(trace_json))
        return 0
    if cmd == "roundtrip":
        from little_dragon.codec.roundtrip import roundtrip_database

        try:
            results = roundtrip_database(args.dir, structural=not args.no_structural,
                                         derived_post=not args.no_derived_post)
        except (FileNotFoundError, ValueError) as e:
            raise UserError(str(e)) from e
        failed = [r for r in results if not r.ok]
        for r in failed:
            print(f"FAIL workload {r.workload} record {r.record}: {r.error}")
        print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
        return 1 if failed else 0
    if cmd == "validate":
        from little_dragon.codec.validate import validate_codec
        from little_dragon.config import load_section

        cfg = load_section("codec", overrides=args.set)
        try:
            bad = validate_codec([Path(h) for h in args.harvest], Path(args.out), cfg)
        except FileNotFoundError as e:
            raise UserError(str(e)) from e
        metrics = json.loads((Path(args.out) / "metrics.json").read_text())
        print(f"{metrics['passed']} passed, {metrics['failed']} failed")
        return 1 if bad else 0
    if cmd == "kinds":
        if args.grammar:
            from little_dragon.codec.grammar import grammar_text

            print(grammar_text())
        else:
            from little_dragon.codec.docs import forms_markdown, kinds_markdown

            print(kinds_markdown() + "\n\nFolded and derived lines:\n\n" + forms_markdown())
        return 0
    raise UserError(f"unknown codec action {cmd}")
