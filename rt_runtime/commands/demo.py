"""`rt-runtime demo`: the main job — replay the built-in scenario through the reference stack and
print its deadline report (the same as `rt-runtime replay --out out/demo --trace out/demo.rttrace`)."""
from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register the subcommand."""
    p = sub.add_parser(name, help=help_text, description=help_text)
    p.add_argument("--out-dir", default="out", help="where the output bag and trace go (default: out/)")
    return p


def run(args: argparse.Namespace) -> int:
    """Replay the built-in scenario, write outputs and trace, and report."""
    from ..cli import UsageError
    from ..outpaths import OutputPathError, check_output
    from . import replay as replay_cmd

    out = Path(args.out_dir)
    try:   # a folder the demo's outputs go into (made by the replay's writes, removed again if they fail)
        check_output(out, "--out-dir", kind="dir", force=True)
    except OutputPathError as e:
        raise UsageError(str(e)) from None
    bag_out = out / "demo_outputs"
    # The replay command's own parser gives every flag its default (no hand-kept copy to fall behind);
    # --force: the demo's own outputs are replaced on every run.
    parser = argparse.ArgumentParser(prog="rt-runtime")
    replay_cmd.add_parser(parser.add_subparsers(), "replay", "replay")
    ns = parser.parse_args(["replay", "--out", str(bag_out), "--trace", str(out / "demo.rttrace"), "--force"])
    status = replay_cmd.run(ns)
    print(f"outputs: {bag_out} (nav_msgs/Path, MarkerArray, DiagnosticArray); trace: {out / 'demo.rttrace'}")
    return status
