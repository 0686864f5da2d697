"""`replay --parallel N`: the same bag through the reference stack with 1, 2 and 3 threads computing.

One digest and the same output bag, message for message, for every N (docs/REPLAY.md, "--workers and
--parallel"); the JSON says how many threads computed.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

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
    doc = json.loads(capsys.readouterr().out)
    assert doc["parallel"] == 2 and doc["bets"] >= 0 and "lost_bet" not in doc
    assert main(["replay", str(short_bag), "--parallel", "0"]) == 2
    assert "--parallel: expected a thread count from 1 to 1024, found '0'" in capsys.readouterr().err


def faulty_radar(cfg, **kw):
    """The stack, but radar's first op raises on scans of some sizes (an op fault that depends only on the
    data, so it hits the same jobs in every run), after 30 ms: the driver has published the job on a bet."""
    import dataclasses
    import time

    from rt_runtime.config.stack import build_bindings
    from rt_runtime.core import Graph

    bindings, initial = build_bindings(cfg, **kw)
    for i, b in enumerate(bindings):
        if b.name == "radar_objects":
            g = b.graph
            fn = g.ops[0].fn

            def first(*args, _fn=fn):
                if args[0].shape[0] % 9 == 4:
                    time.sleep(0.03)
                    raise RuntimeError("radar: a fault on this scan")
                _fn(*args)
            ops = [dataclasses.replace(g.ops[0], fn=first), *g.ops[1:]]
            bindings[i] = dataclasses.replace(b, graph=Graph(g.name, ops, g.inputs, [s.name for s in g.outputs]))
    return bindings, initial


def test_a_lost_bet_replays_again_and_gives_the_outputs_of_one_thread(short_bag: Path, tmp_path: Path, monkeypatch,
                                                                     capsys) -> None:
    """The bet on a faulty radar job is lost, the replay runs again without betting, and its outputs are
    those of one thread."""
    monkeypatch.setattr("rt_runtime.replay.run.build_bindings", faulty_radar)
    cfg = load_stack(CONFIG)
    one = replay(short_bag, cfg, out=tmp_path / "one", until_s=2.0, parallel=1, hardware=False)
    assert one.stats["radar_objects"]["errors"] > 0 and "lost_bet" not in one.extra
    capsys.readouterr()
    two = replay(short_bag, cfg, out=tmp_path / "two", until_s=2.0, parallel=2, hardware=False)
    assert "task 'radar_objects' job" in two.extra["lost_bet"]
    assert "replaying again with each result computed before it is published" in capsys.readouterr().err
    assert two.output_digest == one.output_digest and two.stats == one.stats
    assert messages(tmp_path / "two") == messages(tmp_path / "one")


def test_a_lost_bet_in_a_run_a_signal_ended_replays_again_to_the_same_cut(short_bag: Path, tmp_path: Path,
                                                                          monkeypatch) -> None:
    """Ctrl-C once the replay has pushed 1.5 s of the bag, and a bet lost: found before the signal, the
    rerun is stopped by it in turn; found as the interrupted run settles, the rerun ends where that run
    did, without asking for the signal again. Either way: cut where one thread's replay is cut, marked
    partial, with its outputs."""
    from rt_runtime.replay.run import ReplayRun

    monkeypatch.setattr("rt_runtime.replay.run.build_bindings", faulty_radar)
    pushed = [0]
    push = ReplayRun._push

    def tracked(self, item):
        pushed[0] = item.t_ns
        push(self, item)
    monkeypatch.setattr(ReplayRun, "_push", tracked)

    def stop() -> str | None:   # the signal arrives once 1.5 s of the bag went in (a run starts at 0 again)
        return "SIGINT" if pushed[0] >= 1_500_000_000 else None

    cfg = load_stack(CONFIG)
    one = replay(short_bag, cfg, out=tmp_path / "one", parallel=1, hardware=False, stop=stop)
    pushed[0] = 0
    two = replay(short_bag, cfg, out=tmp_path / "two", parallel=2, hardware=False, stop=stop)
    assert "lost_bet" in two.extra and two.extra["interrupted"] == one.extra["interrupted"] == "SIGINT"
    assert 1.5 <= two.duration_s == one.duration_s < 1.6
    assert two.output_digest == one.output_digest
    assert messages(tmp_path / "two") == messages(tmp_path / "one")


def test_a_set_up_that_fails_after_the_stack_is_built_leaves_no_thread(short_bag: Path, tmp_path: Path) -> None:
    """The output path is taken (no ``replace``): the error names it, the existing file is untouched, and
    the threads the runtime had started to compute (``--parallel 2``) are gone, as are the reader's."""
    import threading

    out = tmp_path / "out"
    out.write_text("someone else's file")
    before = set(threading.enumerate())
    with pytest.raises(Exception, match="out"):
        replay(short_bag, load_stack(CONFIG), out=out, until_s=1.0, parallel=2, hardware=False)
    assert out.read_text() == "someone else's file"
    assert [t.name for t in threading.enumerate() if t not in before and t.is_alive()] == []
