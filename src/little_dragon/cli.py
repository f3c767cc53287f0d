"""``dragon``: one CLI over the pipeline's stage functions.

Each subcommand lives in its stage's package as ``add_parser(subparsers)`` + ``main(args) -> int``; this
module only wires them up (imported lazily, so ``dragon --help`` does not pay for TVM or torch).  Errors
the user can fix (bad params, bad input files) print one line naming the file and exit 2, never a
traceback.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

# re-exported: older callers import these from here; stage packages import them from their own layer
from little_dragon.config import parse_overrides  # noqa: F401
from little_dragon.errors import UserError

# subcommand -> module that defines add_parser(subparsers) and main(args)
COMMANDS: dict[str, str] = {
    "params": "little_dragon.params_cli",
    "codec": "little_dragon.codec.cli",
    "evaluate": "little_dragon.evaluator.cli",
    "agreement": "little_dragon.evaluator.agreement",
    "workloads": "little_dragon.workloads.cli",
    "harvest": "little_dragon.harvest.cli",
    "datasets": "little_dragon.datasets.cli",
    "quality": "little_dragon.quality.cli",
    "train": "little_dragon.training.cli",
    "eval": "little_dragon.evaluation.cli",
    "registry": "little_dragon.evaluation.promote_cli",
    "optimize": "little_dragon.evaluation.optimize_cli",
    "services": "little_dragon.ops.cli",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dragon", description=__doc__.splitlines()[0])
    parser.add_argument("--params", help="params.yaml to read (default: the project's, or $DRAGON_PARAMS)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, modname in COMMANDS.items():
        mod = importlib.import_module(modname)
        mod.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    from little_dragon.config import ConfigError

    # --params holds for this command (and the processes it starts), not for whoever called main() next
    previous = os.environ.get("DRAGON_PARAMS")
    if args.params:
        os.environ["DRAGON_PARAMS"] = os.path.abspath(args.params)
    try:
        return int(args.func(args) or 0)
    except (UserError, ConfigError, FileNotFoundError) as e:
        print(f"dragon {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"dragon {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        if args.params:
            if previous is None:
                os.environ.pop("DRAGON_PARAMS", None)
            else:
                os.environ["DRAGON_PARAMS"] = previous


if __name__ == "__main__":
    sys.exit(main())
