"""``dragon services up|down|status``: the local Prefect and MLflow servers (with their UIs) and the served
``scheduled-retraining`` deployment, on 127.0.0.1 (ports and cron in params.yaml ``retraining``)."""
from __future__ import annotations

import json
import sys


def add_parser(sub) -> None:
    from little_dragon.config import add_set_option

    p = sub.add_parser("services", help="Prefect + MLflow servers with UIs and the scheduled-retraining deployment")
    ssub = p.add_subparsers(dest="services_command", required=True, metavar="ACTION")
    up = ssub.add_parser("up", help="start them all and block; Ctrl-C stops everything started")
    up.add_argument("--no-serve", action="store_true", help="servers only, no served deployment")
    add_set_option(up, "retraining")
    up.set_defaults(func=main)
    for name, text in (("down", "stop the services another `dragon services up` started"),
                       ("status", "print the running services (JSON)")):
        q = ssub.add_parser(name, help=text)
        add_set_option(q, "retraining")
        q.set_defaults(func=main)


def main(args) -> int:
    from little_dragon.config import load_section
    from little_dragon.ops import services

    cfg = load_section("retraining", overrides=args.set)
    if args.services_command == "up":
        try:
            return services.run_services(cfg, serve_deployment=not args.no_serve)
        except RuntimeError as e:
            print(f"dragon services up: error: {e}", file=sys.stderr)
            return 1
    if args.services_command == "down":
        stopped = services.stop_running(cfg)
        print("services stopped" if stopped else "no services were running")
        return 0
    state = services.read_state(cfg)
    print(json.dumps(state or {"running": False}, indent=2))
    return 0
