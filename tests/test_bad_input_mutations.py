"""Property-based damage: the reference config mutated one field at a time, and a recorded bag with
random bytes flipped. Whatever comes in: exit 0, 1 or 2, no traceback, the inputs unchanged, and a
refusal is lines that start with the file they are about."""
from __future__ import annotations

import copy
import hashlib
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rt_runtime import cli
from rt_runtime.sim import record

ROOT = Path(__file__).resolve().parents[1]
STACK = yaml.safe_load((ROOT / "config" / "stack.yaml").read_text())


def paths(node: object, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value in the config (dict keys and list indices)."""
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += paths(v, prefix + (i,))
    return out


PATHS = paths(STACK)
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12), st.floats(allow_nan=True),
                   st.text(max_size=12), st.sampled_from(["0ms", "-5ms", "1e9s", "10 parsecs", "lidar/pointz", "edf"]),
                   st.lists(st.integers(-3, 3), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
MUTATIONS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.function_scoped_fixture])


def mutate(doc: dict, path: tuple, value: object, delete: bool) -> dict:
    out = copy.deepcopy(doc)
    node = out
    for p in path[:-1]:
        node = node[p]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return out


@pytest.mark.timeout(300)
@MUTATIONS
@given(path=st.sampled_from(PATHS), value=VALUES, delete=st.booleans())
# a CI run's draw: a record separator in a channel name, which str.splitlines ends a line at
@example(path=("tasks", 3, "trigger"), value="0\x1e", delete=False)
def test_a_mutated_config_is_checked_or_refused_in_lines_naming_the_file(tmp_path_factory, capsys, path, value,
                                                                            delete) -> None:
    d = tmp_path_factory.mktemp("mut")
    cfg = d / "mutated.yaml"
    cfg.write_text(yaml.safe_dump(mutate(STACK, path, value, delete), sort_keys=False))
    before = cfg.read_bytes()
    rc = cli.main(["check", str(cfg)])
    _, err = capsys.readouterr()
    assert rc in (0, 1, 2) and "Traceback" not in err
    if rc == 2:
        lines = err.strip().splitlines()
        assert lines and all("mutated.yaml" in ln for ln in lines), err
    assert cfg.read_bytes() == before


@pytest.fixture(scope="module")
def one_second_bag(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("bags") / "one_second"
    record(path, "highway_cut_in", 1.0, 3, "mcap")
    return path


@pytest.mark.timeout(600)
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(flips=st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 255)), min_size=1, max_size=6))
def test_a_bag_with_flipped_bytes_replays_or_is_refused_in_one_line(one_second_bag, tmp_path_factory, capsys,
                                                                    flips) -> None:
    d = tmp_path_factory.mktemp("flip")
    bag = d / "bag"
    shutil.copytree(one_second_bag, bag)
    mcap = next(bag.glob("*.mcap"))
    data = bytearray(mcap.read_bytes())
    for where, xor in flips:
        data[min(len(data) - 1, int(where * len(data)))] ^= xor
    mcap.write_bytes(bytes(data))
    digest = hashlib.sha256(mcap.read_bytes()).hexdigest()
    rc = cli.main(["replay", str(bag), "--json", "--out", str(d / "out")])
    out, err = capsys.readouterr()
    assert rc in (0, 2) and "Traceback" not in err, err
    if rc == 2:
        assert len([ln for ln in err.splitlines() if "error:" in ln]) == 1 and not (d / "out").exists(), err
    assert hashlib.sha256(mcap.read_bytes()).hexdigest() == digest
