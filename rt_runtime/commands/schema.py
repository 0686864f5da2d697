"""`rt-runtime schema [--out FILE]`: the JSON Schema of a stack file (``config/schema.py``).

Printed on stdout, or written to FILE atomically (a temporary sibling renamed over it). FILE may
replace a schema this command wrote before (``config/stack.schema.json`` is regenerated with
``rt-runtime schema --out config/stack.schema.json``), never anything else: a YAML file (a stack
file, an input of every other command) or any other existing file is refused, exit status 2.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

YAML_SUFFIXES = (".yaml", ".yml")


def add_parser(subparsers: argparse._SubParsersAction, name: str, help_text: str) -> argparse.ArgumentParser:
    """Register `schema` with its arguments."""
    p = subparsers.add_parser(
        name, help=help_text, description="Print the JSON Schema of a stack file (config/stack.yaml), for editors: "
        "with `# yaml-language-server: $schema=stack.schema.json` as the file's first line, a YAML language "
        "server completes and checks it. The schema checks structure (keys, types, enums, durations); "
        "`rt-runtime check` checks the rest.")
    p.add_argument("--out", metavar="FILE", help="write it to FILE (a .json file; replaces only a schema written "
                   "by this command) instead of printing it")
    return p


def render() -> str:
    """The schema as written: two-space indented JSON, non-ASCII kept, a final newline."""
    from ..config.schema import json_schema

    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def _is_our_schema(path: Path) -> bool:
    """Whether ``path`` holds a schema this command wrote (so replacing it loses nothing)."""
    from ..config.schema import StackFile

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and "$schema" in doc and doc.get("title") == StackFile.model_config.get("title")


def run(args: argparse.Namespace) -> int:
    """Print or write the schema; 0, or 2 (a UsageError) for an output path that must not be written."""
    from ..cli import UsageError
    from ..outpaths import OutputPathError, check_output, write_atomic

    text = render()
    if args.out is None:
        print(text, end="")
        return 0
    out = Path(args.out)
    if out.suffix.lower() in YAML_SUFFIXES:
        raise UsageError(f"--out {out}: a YAML file is a configuration, an input of the other commands; "
                         f"the schema is JSON (e.g. --out config/stack.schema.json)")
    ours = out.is_file() and not out.is_symlink() and _is_our_schema(out)
    try:
        check_output(out, "--out", force=ours)
    except OutputPathError as e:
        hint = "; it replaces only a schema written by `rt-runtime schema`" if "exists already" in str(e) else ""
        raise UsageError(str(e).replace("; pass --force to replace it", "") + hint) from None
    try:
        write_atomic(out, text, like=out if ours else None)
    except OSError as e:
        raise UsageError(f"--out {out}: cannot write: {e.strerror or e}") from None
    return 0
