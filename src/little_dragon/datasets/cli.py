"""``dragon datasets build``: the `split` stage (train/validation sets, sealed set, dataset card)."""
from __future__ import annotations

import json
import logging

log = logging.getLogger(__name__)


def add_parser(sub) -> None:
    from little_dragon.config import add_set_option

    p = sub.add_parser("datasets", help="build the construction/refinement SFT sets and the sealed split")
    dsub = p.add_subparsers(dest="datasets_command", required=True, metavar="ACTION")
    b = dsub.add_parser("build", help="harvests -> train/validation JSONL, sealed set + manifest, dataset card")
    b.add_argument("--metrics", help="write the counts as JSON here (DVC metrics)")
    b.add_argument("--card", help="dataset card folder (default: params datasets.card_dir)")
    add_set_option(b, "datasets")
    b.set_defaults(func=main)


def main(args) -> int:
    from little_dragon.config import load_section
    from little_dragon.datasets.split import LeakageError
    from little_dragon.datasets.stage import split_stage
    from little_dragon.errors import UserError

    cfg = load_section("datasets", overrides=args.set)
    try:
        res = split_stage(cfg, args.card, args.metrics)
    except LeakageError as e:
        raise UserError(str(e)) from e
    print(json.dumps(res.stats["examples"]))
    if res.stats["examples"]["total"] == 0:
        log.error("datasets: no example was built (see the harvest counts in %s/stats.json)", res.out_dir)
        return 1
    return 0
