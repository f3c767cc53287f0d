"""``dragon params``: show every params.yaml section as its typed config, with help text."""
from __future__ import annotations

import dataclasses
import json

from little_dragon.config import SECTIONS, load_section, to_dict


def add_parser(sub) -> None:
    p = sub.add_parser("params", help="print params.yaml as typed, validated config")
    p.add_argument("--explain", action="store_true", help="show each field's help text")
    p.set_defaults(func=main)


def main(args) -> int:
    for name in SECTIONS:
        cfg = load_section(name)
        if args.explain:
            print(f"[{name}]")
            for f in dataclasses.fields(cfg):
                print(f"  {f.name} = {json.dumps(getattr(cfg, f.name), default=str)}  # {f.metadata.get('help', '')}")
        else:
            print(json.dumps({name: to_dict(cfg)}, default=str))
    return 0
