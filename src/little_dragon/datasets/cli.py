"""``dragon datasets build``: the `split` stage (train/validation sets, sealed set, dataset card)."""
from __future__ import annotations

import json
import logging

log = logging.getLogger(__name__)


def add_parser(sub) -> None:
    p = sub.add_parser("datasets", help="build the construction/refinement SFT sets and the sealed split")
    dsub = p.add_subparsers(dest="datasets_command", required=True, metavar="ACTION")
    b = dsub.add_parser("build", help="harvests -> train/validation JSONL, sealed set + manifest, dataset card")
    b.add_argument("--metrics", help="write the counts as JSON here (DVC metrics)")
    b.add_argument("--card", help="dataset card folder (default: params datasets.card_dir)")
    b.add_argument("--set", action="append", default=[], metavar="KEY=JSON",
                   help="override a datasets field, e.g. --set seed=1 (repeatable)")
    b.set_defaults(func=main)


def main(args) -> int:
    from little_dragon import atomic, tracking
    from little_dragon.cli import UserError, parse_overrides
    from little_dragon.config import flat_params, load_section
    from little_dragon.datasets.build import build_datasets
    from little_dragon.datasets.card import PLOTS, write_card
    from little_dragon.datasets.split import LeakageError

    cfg = load_section("datasets", overrides=parse_overrides(args.set))
    card_dir = args.card or cfg.card_dir
    with tracking.stage_run("split", params=flat_params(cfg), inputs={"workloads": cfg.workloads}) as mlf:
        try:
            res = build_datasets(cfg)
        except LeakageError as e:
            raise UserError(str(e)) from e
        card = write_card(res.examples, res.stats, cfg, card_dir)
        flat = {f"examples.{k}": v for k, v in res.stats["examples"].items()}
        flat.update({f"workloads.{k}": v for k, v in res.stats["workloads"].items()})
        flat.update({f"harvest.{k}": v for k, v in res.stats["harvest"].items()})
        flat.update({f"rendering.{k}": v for k, v in res.stats["rendering"].items()})
        flat.update({f"tokens.{k}": v for k, v in res.stats["tokens"].items()})
        if mlf is not None:
            mlf.log_metrics({k: float(v) for k, v in flat.items()})
            mlf.log_dict(res.stats, "dataset_stats.json")
            mlf.log_artifact(str(card))
            for p in PLOTS:
                mlf.log_artifact(str(card.parent / p))
            tracking.log_outputs(mlf, {"datasets": res.out_dir, "sealed": res.sealed_dir})
        if args.metrics:
            atomic.write_json(args.metrics, {k: v for k, v in res.stats.items()
                                             if k not in ("codec_errors", "excluded_examples")})
    print(json.dumps(res.stats["examples"]))
    if res.stats["examples"]["total"] == 0:
        log.error("datasets: no example was built (see the harvest counts in %s/stats.json)", res.out_dir)
        return 1
    return 0
