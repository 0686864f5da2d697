"""The stack file's schema (rt_runtime/config/schema.py): the committed JSON Schema, the stack files
under config/ against it, the key lists the hand-written validation derives from it, `rt-runtime schema`."""
import copy
import importlib.util
import json
import os
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from rt_runtime import cli
from rt_runtime.commands import schema as schema_cmd
from rt_runtime.config import realtime, schema, taskset, wiring
from rt_runtime.config.stack import parse_stack
from rt_runtime.config.taskset import ConfigError, load_yaml, parse_join

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "config"
COMMITTED = CONFIG / "stack.schema.json"


@pytest.fixture(autouse=True)
def _only_existing_commands(monkeypatch):
    # cli.main imports every registered subcommand; skip any that has not landed yet.
    for name in list(cli.COMMANDS):
        if importlib.util.find_spec(f"rt_runtime.commands.{name}") is None:
            monkeypatch.delitem(cli.COMMANDS, name)


def stack_files():
    """Every YAML under config/ that is a stack file (or a bare task set): policy: and tasks: at the top."""
    out = []
    for p in sorted(CONFIG.rglob("*.y*ml")):
        doc = yaml.safe_load(p.read_text())
        if isinstance(doc, dict) and "policy" in doc and "tasks" in doc:
            out.append(p)
    return out


def validate(doc):
    """Against the exported schema with jsonschema when it is installed, else with the pydantic model."""
    try:
        import jsonschema
    except ImportError:
        schema.StackFile.model_validate(doc)
    else:
        jsonschema.validate(doc, json.loads(COMMITTED.read_text()))


# ---- the committed schema and the files it describes -----------------------------------------------

def test_committed_schema_is_what_the_command_prints(capsys):
    assert cli.main(["schema"]) == 0
    printed = capsys.readouterr().out
    assert printed == COMMITTED.read_text(encoding="utf-8"), \
        "config/stack.schema.json is stale: rt-runtime schema --out config/stack.schema.json"
    doc = json.loads(printed)
    assert doc["$schema"].startswith("https://json-schema.org/") and doc["additionalProperties"] is False
    assert set(doc["properties"]) == set(wiring.STACK_KEYS) and doc["required"] == ["policy", "tasks"]
    # Descriptions come from the field docs; durations carry the unit pattern parse_duration accepts.
    period = doc["$defs"]["Task"]["properties"]["period"]
    assert "Release period" in period["description"]
    assert any("ms" in alt.get("pattern", "") for alt in period["anyOf"])
    assert all(d.get("additionalProperties") is False for d in doc["$defs"].values() if "properties" in d)


def test_stack_yaml_names_the_schema_on_its_first_line():
    first = (CONFIG / "stack.yaml").read_text().splitlines()[0]
    assert first == "# yaml-language-server: $schema=stack.schema.json"


def test_every_stack_file_under_config_validates():
    files = stack_files()
    assert CONFIG / "stack.yaml" in files and len(files) >= 2
    for p in files:
        validate(load_yaml(p))
        taskset.load_taskset(p)   # and the hand-written validation agrees


@pytest.mark.parametrize("edit, where", [
    (lambda d: d.update(chain=[]), "chain"),
    (lambda d: d["tasks"][0].update(wcett="1ms"), "wcett"),
    (lambda d: d["tasks"][0].update(period=100), "period"),
    (lambda d: d["tasks"][0].update(period="100 parsecs"), "period"),
    (lambda d: d["tasks"][0].update(criticality="extreme"), "criticality"),
    (lambda d: d["channels"][0].update(polcy="latest"), "polcy"),
    (lambda d: d["ingress"][0].update(codec="nope"), "codec"),
    (lambda d: d.update(realtime={"enabled": True, "prio": 5}), "prio"),
])
def test_the_model_refuses_what_the_loader_refuses(edit, where):
    doc = load_yaml(CONFIG / "stack.yaml")
    edit(doc)
    with pytest.raises(ValidationError, match=where):
        schema.StackFile.model_validate(doc)
    with pytest.raises(ConfigError):
        parse_stack(doc, "stack.yaml")


# ---- the key lists: one source ----------------------------------------------------------------------

def test_key_lists_are_the_models_fields():
    assert taskset.TASK_KEYS is schema.TASK_KEYS and taskset.RUNTIME_TASK_KEYS is schema.RUNTIME_TASK_KEYS
    assert taskset.CHAIN_KEYS is schema.CHAIN_KEYS and taskset.JOIN_KEYS is schema.JOIN_KEYS
    for name in ("STACK_KEYS", "CHANNEL_KEYS", "INGRESS_KEYS", "EGRESS_KEYS", "HYSTERESIS_KEYS"):
        assert getattr(wiring, name) is getattr(schema, name), name
    assert schema.TASK_KEYS + schema.RUNTIME_TASK_KEYS == tuple(schema.Task.model_fields)
    assert set(taskset.DURATION_KEYS) <= set(schema.TASK_KEYS)
    # Lists still written out elsewhere (config/realtime.py) must say the same.
    assert realtime.KEYS == schema.REALTIME_KEYS


def every_key_doc():
    """config/stack.yaml with every documented key given somewhere (join keys: see the test below)."""
    doc = copy.deepcopy(load_yaml(CONFIG / "stack.yaml"))
    doc.update(description="every key", threads=1, steal=False,
               realtime={"enabled": False, "priority": 10, "cpus": [sorted(os.sched_getaffinity(0))[0]]})
    tasks = {t["name"]: t for t in doc["tasks"]}
    tasks["radar_objects"].update(priority=1, blocking="0ms", jitter="0ms", offset="0ms", group="perception",
                                  worker=0, publish="let", optional=["radar"], compile="eager",
                                  redundancy={"mode": "dual", "compare": "tolerance", "atol": 1e-5, "rtol": 0.0,
                                              "budget": "nominal", "checks": {"radar_object_count": {"capacity": 64}},
                                              "cost": "100us"})
    tasks["planning"].update(fallback_args={})
    tasks["planning"]["speculate"]["margin"] = 2.0
    doc["channels"][0]["depth"] = 1
    doc["safety"]["max_latency"] = "30ms"
    return doc


def test_a_stack_file_with_every_documented_key_parses():
    doc = every_key_doc()
    used = {
        "STACK_KEYS": set(doc),
        "TASK_KEYS": {k for t in doc["tasks"] for k in t} & set(schema.TASK_KEYS),
        "RUNTIME_TASK_KEYS": {k for t in doc["tasks"] for k in t} & set(schema.RUNTIME_TASK_KEYS),
        "CHAIN_KEYS": {k for c in doc["chains"] for k in c},
        "CHANNEL_KEYS": {k for c in doc["channels"] for k in c},
        "INGRESS_KEYS": {k for r in doc["ingress"] for k in r},
        "EGRESS_KEYS": {k for r in doc["egress"] for k in r},
        "SAFETY_KEYS": set(doc["safety"]),
        "HYSTERESIS_KEYS": set(doc["safety"]["hysteresis"]),
        "SPECULATE_KEYS": {k for t in doc["tasks"] for k in t.get("speculate") or {}},
        "REDUNDANCY_KEYS": {k for t in doc["tasks"] for k in t.get("redundancy") or {}},
        "REALTIME_KEYS": set(doc["realtime"]),
    }
    for name, keys in used.items():   # a key added to a model is added here too, and so checked below
        assert keys == set(getattr(schema, name)), f"{name}: not covered: {set(getattr(schema, name)) - keys}"
    validate(doc)
    cfg = parse_stack(doc, "every_key.yaml")
    assert cfg.threads == 1 and cfg.realtime.priority == 10


def test_join_keys_parse():
    both = [{"all": ["a", "b"], "window": "5ms", "pairing": "approximate"}, {"any": ["a", "b"]}]
    assert {k for j in both for k in j} == set(schema.JOIN_KEYS)
    for j in both:
        schema.Join.model_validate(j)
        parse_join(j, ValueError)
    with pytest.raises(ValidationError):
        schema.Join.model_validate({"all": ["a"], "windw": "5ms"})


# ---- rt-runtime schema --out ------------------------------------------------------------------------

def test_out_refuses_a_stack_file(capsys):
    before = (CONFIG / "stack.yaml").read_bytes()
    assert cli.main(["schema", "--out", str(CONFIG / "stack.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rt-runtime schema: error: --out" in err and "YAML" in err
    assert (CONFIG / "stack.yaml").read_bytes() == before


def test_out_writes_replaces_its_own_and_refuses_other_files(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert cli.main(["schema", "--out", str(out)]) == 0
    assert out.read_text() == schema_cmd.render()
    out.write_text(out.read_text().replace("Release period", "Old text"))   # a schema written before
    assert cli.main(["schema", "--out", str(out)]) == 0 and out.read_text() == schema_cmd.render()
    other = tmp_path / "notes.json"
    other.write_text('{"mine": 1}')
    assert cli.main(["schema", "--out", str(other)]) == 2 and other.read_text() == '{"mine": 1}'
    assert "exists already" in capsys.readouterr().err
    assert cli.main(["schema", "--out", str(tmp_path / "x.yml")]) == 2
    assert not (tmp_path / "x.yml").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["notes.json",
                                                                                                  "s.json"]
