"""`rt-runtime faults`: a fault-injection campaign over the built-in scenario (docs/SAFETY.md)."""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any


def default_campaign() -> Path:
    """The default fault campaign (config/campaign.yaml)."""
    from ..replay.defaults import config_file

    return config_file("campaign.yaml")


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register the subcommand."""
    from . import args as A

    p = sub.add_parser(name, help=help_text, description=help_text + ". Per fault class: injected, detected, "
                       "recovered, wrong outputs published, crashes, deadline misses, degrade entries.")
    p.add_argument("--config", help="stack configuration (default: config/stack.yaml)")
    p.add_argument("--campaign", help="campaign file (default: config/campaign.yaml)")
    p.add_argument("--bag", help="scenario bag (default: the built-in scenario)")
    p.add_argument("--device", type=A.device, help="cpu, cpu-async, cuda or cuda:N (default: the config's)")
    p.add_argument("--json", action="store_true", help="print exactly one JSON document")
    p.add_argument("--verbose", action="store_true", help="also list every injection and its outcome")
    return p


def run(args: argparse.Namespace) -> int:
    """Run the campaign and print the table (or JSON); 0 unless a run crashed."""
    from ..bag import BagError
    from ..cli import UsageError
    from ..config import ConfigError
    from ..replay.defaults import default_bag, default_config
    from ..faults.campaign import load_campaign, render, run_campaign, stack_under_test

    try:
        campaign = load_campaign(args.campaign or default_campaign())
        cfg = stack_under_test(args.config or default_config(), campaign)
        if args.device:
            cfg = dataclasses.replace(cfg, device=args.device)
        bag = args.bag or default_bag(progress=sys.stderr.isatty())
    except (ConfigError, ValueError, FileNotFoundError) as e:
        raise UsageError(str(e)) from None
    tty = sys.stderr.isatty() and not args.json

    def progress(name: str, outcome: Any) -> None:
        print(f"\rfaults: {name:<10} {outcome.injection.describe():<60}", end="", file=sys.stderr, flush=True)

    try:
        result = run_campaign(campaign, cfg, bag, progress=progress if tty else None)
    except (ConfigError, ValueError, BagError) as e:   # a bag that cannot be read: its own message names it
        raise UsageError(str(e)) from None
    if tty:
        print(file=sys.stderr)
    if args.json:
        print(json.dumps(result.to_json()))
    else:
        print(render(result, verbose=args.verbose))
    return 1 if any(c.to_json()["crashes"] for c in result.classes) else 0
