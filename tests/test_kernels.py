"""Kernels and the compiler seam (exec/kernel.py, exec/compile.py, exec/cache.py): eager by default with no
TorchScript, the calls a warm-up records, the net-benefit choice, the cache's keys and its unreadable records,
and one tiny kernel through ``jit`` (the only compile here: 4-40 s on a 2-core machine)."""
from __future__ import annotations

import json
import warnings

import pytest
import torch

from rt_runtime.exec import GraphExecutor, Kernel, KernelError, kernel
from rt_runtime.exec import cache
from rt_runtime.exec.compile import REQUESTS, bit_equal, compile_graph, default_request, net_benefit, pick, prepare
from rt_runtime.exec.kernel import recording


def _axpy(a: torch.Tensor, x: torch.Tensor, out: torch.Tensor, k: int) -> None:
    y = x
    for _ in range(k):
        y = torch.addcmul(y, a, x).clamp(-3.0, 3.0) * 0.999
    out.copy_(y)


def _scale(x: torch.Tensor, out: torch.Tensor, s: float) -> None:
    torch.mul(x, s, out=out)


def test_a_kernel_runs_its_python_body_by_default_and_nothing_warns() -> None:
    k = kernel(_axpy)
    g = torch.Generator().manual_seed(11)
    a, x = torch.randn(257, generator=g), torch.randn(257, generator=g)
    want, got = torch.empty(257), torch.empty(257)
    _axpy(a, x, want, 40)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # torch's TorchScript deprecation warning would raise here
        k(a, x, got, 40)
    assert torch.equal(want, got) and k.mode == "eager" and k.impl is _axpy and "eager" in repr(k)
    assert k.name == f"{__name__}._axpy" and k.__name__ == "_axpy"


def test_a_module_is_a_kernel_named_by_its_class() -> None:
    lin = torch.nn.Linear(3, 2)
    k = kernel(lin)
    x = torch.ones(1, 3)
    assert torch.equal(k(x), lin(x)) and k.name == "torch.nn.modules.linear.Linear"


def test_recording_notes_each_kernels_first_arguments_and_calls_then_restores_it() -> None:
    k = kernel(_scale)
    x, out = torch.arange(4.0), torch.empty(4)
    with recording() as seen:
        k(x, out, 2.0)
        k(x, out, 3.0)
    assert seen[k][1] == 2 and seen[k][0][2] == 2.0 and seen[k][0][0] is x
    assert k.impl is _scale and out.tolist() == [0.0, 3.0, 6.0, 9.0]


def test_use_refuses_an_unknown_mode_in_one_line_and_the_eager_switch_wins(monkeypatch) -> None:
    k = kernel(_scale)
    with pytest.raises(KernelError, match=f"{__name__}._scale: mode 'fast': expected one of eager, jit, aot"):
        k.use("fast", _scale)
    monkeypatch.setenv("RT_RUNTIME_EAGER_KERNELS", "1")
    k.use("jit", lambda *a: None)
    assert k.mode == "eager" and k.impl is _scale


def test_the_net_benefit_rule_picks_a_bit_identical_mode_that_pays_for_itself() -> None:
    assert net_benefit(100e-6, 40e-6, 1000, 0.05) == pytest.approx(0.01)
    rec = {"t_eager": 100e-6, "modes": {"jit": {"t": 40e-6, "build_s": 10.0, "load_s": 0.5, "bit_equal": True},
                                        "aot": {"t": 20e-6, "build_s": 30.0, "load_s": 1.0, "bit_equal": False}}}
    # 60 us x 6000 calls = 0.36 s saved: less than a build, more than nothing
    assert pick("auto", rec, 6000, built=set())[0] == "eager"
    mode, nets, why = pick("auto", rec, 1e6, built=set())          # 60 s saved, 10 s build: jit
    assert mode == "jit" and nets["jit"] == pytest.approx(50.0) and "bit-identical" in why
    assert pick("auto", rec, 1e6, built={"jit"})[1]["jit"] == pytest.approx(59.5)   # built: its load's cost
    # aot saves more, but its bits differ from eager's: auto never takes it
    assert pick("auto", rec, 1e9, built={"jit", "aot"})[0] == "jit"
    assert pick("aot", rec, 10, built=set())[0] == "aot"              # asked: taken, whatever it costs
    assert pick("auto", {"modes": {}}, 1e9, set()) == ("eager", {}, "no compiled mode measured (rt-runtime compile --build measures)")
    failed = {"t_eager": 1e-3, "modes": {"aot": {"error": "Unsupported: data-dependent", "build_s": 2.0}}}
    assert pick("aot", failed, 1e9, set())[0] == "eager" and "aot failed: Unsupported" in pick("aot", failed, 1, set())[2]
    assert pick("auto", failed, 1e9, set()) == ("eager", {}, "aot failed: Unsupported: data-dependent")


def test_auto_chooses_by_the_bags_figures_where_measured_never_the_zeros() -> None:
    from rt_runtime.exec.compile import figures

    zeros = {"t_eager": 15e-3, "modes": {"jit": {"t": 0.3e-3, "build_s": 20.0, "bit_equal": True},
                                         "aot": {"t": 0.1e-3, "build_s": 20.0, "bit_equal": True}}}
    assert pick("auto", zeros, 6000, set())[0] == "aot"          # on the zeros: 88 s saved, it pays
    real = {**zeros, "real": {"inputs": "8 calls from b", "t_eager": 0.3e-3, "modes": {"jit": {"t": 0.2e-3,
                                                                                        "bit_equal": True}}}}
    mode, nets, why = pick("auto", real, 6000, set())             # on the bag: 0.6 s saved for a 20 s build
    assert mode == "eager" and set(nets) == {"jit"} and nets["jit"] == pytest.approx(-19.4)
    assert figures(real)["modes"]["aot"] == {"build_s": 20.0}      # the zeros' aot figures are not mixed in
    assert pick("auto", real, 1e6, set()) == ("jit", pytest.approx({"jit": 80.0}),
                                              "largest net benefit, bit-identical on 8 calls from b")
    only_zeros = {**zeros, "real": {"inputs": "8 calls from b", "t_eager": 0.3e-3, "modes": {}}}
    assert pick("auto", only_zeros, 1e9, set()) == (
        "eager", {}, "aot, jit measured on the warm-up's zeros only, not used (rt-runtime compile --bag measures it)")


def test_a_mode_whose_bits_differ_on_the_recorded_arguments_is_never_taken() -> None:
    from rt_runtime.exec.compile import measure_real

    k = kernel(_scale)
    argsets = [(torch.arange(n, dtype=torch.float32), torch.empty(n), 2.0) for n in (3, 5)]
    rec = {"t_eager": 1.0, "modes": {"jit": {"t": 1e-9, "build_s": 0.0, "bit_equal": True},
                                     "aot": {"t": 1e-9, "build_s": 0.0, "bit_equal": True}}}
    wrong = lambda x, y, s: y.copy_(x * s + 1e-6)   # noqa: E731 - a compiled stand-in, off by a bit
    assert measure_real(k, rec, {"jit": k.py, "aot": wrong}, argsets, "2 calls from b")
    real = rec["real"]
    assert real["shapes"] == [[[3], [3], 2.0], [[5], [5], 2.0]] and real["t_eager"] > 0
    assert real["modes"]["jit"]["bit_equal"] is True and real["modes"]["aot"]["bit_equal"] is False
    assert pick("auto", rec, 1e12, set())[0] in ("eager", "jit")   # aot never, however fast
    assert not measure_real(k, rec, {"jit": k.py}, argsets, "2 calls from b")   # measured: kept


def test_the_default_request_is_eager_and_a_bad_one_names_the_variable(monkeypatch) -> None:
    monkeypatch.delenv("RT_RUNTIME_COMPILE", raising=False)
    assert default_request() == "eager" and REQUESTS == ("auto", "eager", "jit", "aot")
    monkeypatch.setenv("RT_RUNTIME_COMPILE", "fastest")
    with pytest.raises(ValueError, match="RT_RUNTIME_COMPILE: expected one of auto, eager, jit, aot, found 'fastest'"):
        default_request()


def test_the_cache_key_follows_shapes_scalars_device_and_torch(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("RT_RUNTIME_CACHE", str(tmp_path))
    k = kernel(_scale)
    x, out = torch.ones(4), torch.empty(4)
    base = cache.key(k, (x, out, 2.0), "cpu")
    assert base == cache.key(k, (torch.zeros(4), torch.empty(4), 2.0), "cpu")   # values of tensors: no
    assert len({base, cache.key(k, (torch.ones(5), torch.empty(5), 2.0), "cpu"),
                cache.key(k, (x, out, 3.0), "cpu"), cache.key(k, (x, out, 2.0), "cuda:0"),
                cache.key(kernel(_axpy), (x, out, 2.0), "cpu")}) == 5
    monkeypatch.setattr(torch, "__version__", "0.0.0")
    assert cache.key(k, (x, out, 2.0), "cpu") != base
    assert cache.cache_dir() == tmp_path


def test_an_unreadable_record_is_one_note_then_rebuilt_not_a_crash(monkeypatch, tmp_path, capsys) -> None:
    monkeypatch.setenv("RT_RUNTIME_CACHE", str(tmp_path))
    cache.save_record("abc", {"kernel": "k", "modes": {}, "t_eager": 1e-5})
    assert cache.load_record("abc")["t_eager"] == 1e-5 and cache.load_record("nope") is None
    (tmp_path / "abc.json").write_text('{"kernel": "k", "mo')         # cut short
    assert cache.load_record("abc") is None and not (tmp_path / "abc.json").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "abc.json: unreadable (JSONDecodeError" in err[0] and err[0].endswith("rebuilt")
    (tmp_path / "old.json").write_text(json.dumps({"version": -1, "modes": {}}))
    assert cache.load_record("old") is None and "not a record of this version" in capsys.readouterr().err
    cache.save_record("bag", {"kernel": "k", "modes": {}, "real": ["a bag's figures, garbled"]})
    assert cache.load_record("bag") is None
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "its bag's figures are not a record's" in err[0] and err[0].endswith("rebuilt")


def test_auto_and_eager_build_nothing_and_keep_the_python_body(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("RT_RUNTIME_CACHE", str(tmp_path))
    k = kernel(_scale)
    with recording() as seen:
        k(torch.ones(3), torch.empty(3), 2.0)
    (auto,) = prepare(seen, "auto", 100, 1, "cpu")
    (eager,) = prepare(seen, "eager", 100, 1, "cpu")
    assert auto.mode == eager.mode == "eager" and k.impl is _scale and "no compiled mode measured" in auto.why
    assert auto.t_eager is None and not list(tmp_path.glob("*.json"))   # nothing timed, nothing written
    with pytest.raises(ValueError, match="compile: expected one of auto, eager, jit, aot, found 'fast'"):
        prepare(seen, "fast", 100, 1, "cpu")


def test_jit_builds_once_at_set_up_writes_the_eager_bits_and_auto_then_reads_the_record(monkeypatch, tmp_path, capsys):
    """The one compile of the suite: a one-op kernel in a one-op graph through ``jit``, cached in a tmp folder."""
    from rt_runtime import Graph, Op, TensorSpec

    monkeypatch.setenv("RT_RUNTIME_CACHE", str(tmp_path))
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    # Inductor's own cache where torch keeps it: warm after a first run (about 5 s here instead of 35)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())
    from rt_runtime.exec import compile as seam

    monkeypatch.setattr(seam, "JIT_OPTIONS", (None,))   # the Python wrapper alone: a C++ one takes 30 s more cold
    k = kernel(_scale)
    xs, ys = TensorSpec("x", (8,), "float32"), TensorSpec("y", (8,), "float32")
    ex = GraphExecutor(Graph("g", [Op("scale", lambda x, y: k(x, y, 2.0), (xs,), (ys,))], [xs], ["y"]))
    x = torch.arange(8.0)
    (c,) = compile_graph(ex, {"x": x}, "jit", jobs=1000, runs=2)
    assert c.mode == "jit" and k.mode == "jit" and c.calls == 1000 and c.bit_equal == {"jit": True}
    assert c.t["jit"] > 0 and c.cost["jit"] > 0 and c.net["jit"] < 0    # 1000 calls never pay for a build
    assert torch.equal(ex.run({"x": x})["y"], x * 2.0)
    # a job runs the compiled graph: built in inference mode, as the executor calls it (in another grad
    # mode Dynamo's guards would fail: a recompile, refused under this stance, eager in a live run)
    with torch.compiler.set_stance("fail_on_recompile"):
        ex.run({"x": x})
    assert bit_equal(k, k.impl, (x, torch.empty(8), 2.0))
    assert f"kernel {__name__}._scale: jit built in" in capsys.readouterr().err
    rec = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert rec["kernel"] == f"{__name__}._scale" and rec["modes"]["jit"]["bit_equal"] is True
    # auto reads the record, builds nothing, and takes jit at 1e9 calls if its call is faster (a one-op kernel's
    # may not be: Dynamo's guards cost more than one small aten call)
    (a,) = compile_graph(ex, {"x": x}, "auto", jobs=1e9, runs=1)
    assert a.t == c.t and a.t_eager == c.t_eager and "built in" not in capsys.readouterr().err
    assert a.mode == ("jit" if c.t["jit"] < c.t_eager else "eager") and (a.net["jit"] > 0) == (a.mode == "jit")
    # the set-up path replay and the live node take: warm_up, one line per graph saying what it chose
    from rt_runtime.exec.warmup import warm_up

    assert warm_up(ex, runs=1, compile="jit", expected_jobs=10) and k.mode == "jit"
    err = capsys.readouterr().err
    assert "rt_runtime: compile: graph 'g' (jit): 1 jit of 1 kernels, set-up" in err and "built in" not in err
    k.use("eager", k.py)
    torch.compiler.set_stance("default")


def test_no_torchscript_is_left_in_the_runtime_or_the_pipelines() -> None:
    """torch deprecates TorchScript (a DeprecationWarning in 2.13, a FutureWarning in 2.14): none of it is used."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    users = [str(p.relative_to(root)) for d in ("rt_runtime", "pipelines") for p in sorted((root / d).rglob("*.py"))
             if "torch.jit" in p.read_text() or "jit.script" in p.read_text()]
    assert users == []
