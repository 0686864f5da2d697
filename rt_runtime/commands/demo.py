"""`rt-runtime demo`: the main job — replay the built-in scenario through the reference stack and
print its deadline report (the same as `rt-runtime replay --out out/demo --trace out/demo.rttrace`)."""
from __future__ import annotations

import argparse
import shutil
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register the subcommand."""
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--out-dir", default="out", help="where the output bag and trace go (default: out/)")
    return p


def run(args: argparse.Namespace) -> int:
    """Replay the built-in scenario, write outputs and trace, and report."""
    from . import replay as replay_cmd

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    bag_out = out / "demo_outputs"
    if bag_out.exists():
        shutil.rmtree(bag_out)
    ns = argparse.Namespace(bag=None, config=None, out=str(bag_out), out_format="mcap", speed="max", workers=None,
                            trace=str(out / "demo.rttrace"), remap=[], until=None, json=False, speculate=None,
                            force=True)   # the demo's own outputs: replaced on every run
    status = replay_cmd.run(ns)
    print(f"outputs: {bag_out} (nav_msgs/Path, MarkerArray, DiagnosticArray); trace: {out / 'demo.rttrace'}")
    return status
