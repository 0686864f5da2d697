"""`replay --parallel N`: the same bag through the reference stack with 1, 2 and 3 threads computing.

One digest and the same output bag, message for message, for every N (docs/REPLAY.md, "--workers and
--parallel"); the JSON says how many threads computed.
"""
from __future__ import annotations

import json
from pathlib import Path

from rt_runtime.bag import open_bag
from rt_runtime.cli import main
from rt_runtime.config.stack import load_stack
from rt_runtime.replay import replay

from replay_fixtures import short_bag  # noqa: F401 - a fixture
from test_replay_determinism import CONFIG


def messages(bag: Path) -> list[tuple[str, int, bytes]]:
    with open_bag(bag) as r:
        return [(m.topic, m.t_ns, bytes(m.raw_cdr)) for m in r.messages()]


def test_one_digest_and_the_same_outputs_for_every_thread_count(short_bag: Path, tmp_path: Path) -> None:
    cfg = load_stack(CONFIG)
    runs = {n: replay(short_bag, cfg, out=tmp_path / f"out{n}", until_s=2.0, parallel=n, hardware=False)
            for n in (1, 2, 3)}
    ref = runs[1]
    assert ref.clean and ref.deterministic and ref.outputs["/planning/trajectory"] > 5
    out = messages(tmp_path / "out1")
    for n, r in runs.items():
        assert r.parallel == n
        assert r.output_digest == ref.output_digest
        assert r.stats == ref.stats
        assert messages(tmp_path / f"out{n}") == out


def test_json_reports_the_threads_computing(short_bag: Path, capsys) -> None:
    assert main(["replay", str(short_bag), "--until", "0.5", "--parallel", "2", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["parallel"] == 2
    assert main(["replay", str(short_bag), "--parallel", "0"]) == 2
    assert "--parallel: expected a thread count from 1 to 1024, found '0'" in capsys.readouterr().err
