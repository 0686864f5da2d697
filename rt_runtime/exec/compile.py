"""The compiler seam: each kernel a graph calls runs ``eager``, ``jit`` or ``aot``, chosen at set-up.

``jit`` is ``torch.compile`` (Inductor, dynamic shapes, its C++ wrapper where it takes the kernel: off
the GIL; after set-up a call that would recompile runs eagerly instead, process-wide (Dynamo's
``eager_on_recompile`` stance): nothing compiles inside a live job). ``aot`` is ``torch.export`` at the
shapes and scalars of the warm-up's call, then AOTInductor (``aoti_compile_and_package``, loaded by
``aoti_load_package``); a call with other shapes or scalars runs the Python body (counted in
``AotKernel.fallbacks``). ``auto`` takes the mode with the largest positive net benefit

    net = (t_eager - t_compiled) x expected calls - cost

(cost: the build's time where nothing is cached yet, else the load's), among the modes whose output was
bit-identical to the eager body's on the arguments they were measured on (a bag's where recorded, else the
warm-up's: so ``auto`` keeps the eager digest as far as those show); ``eager`` otherwise. ``auto`` builds nothing itself: it reads what ``rt-runtime
compile`` measured (``exec/cache.py``); with nothing measured a kernel stays eager. Asking ``jit`` or
``aot`` builds what is missing at set-up, with one line saying how long it took. A kernel that cannot
be built in a mode (Dynamo or export refuses it) runs eager, with one line saying why.

Compilation is not thread-safe: everything here runs on one thread, before the workers start.
A kernel is built on the warm-up's synthetic arguments (zeros) and first measured on them: a weak probe
of speed and of bit-identity for data-dependent bodies (10-200x a real call: docs/BENCHMARKS.md, "Kernel
compile modes"). ``rt-runtime compile --bag`` also measures it on the arguments it got in the bag's first
seconds (``exec/sample.py``), stored beside the probe's under the same key (the record's ``real``, marked
with the bag); where those exist ``auto`` reads them alone: a mode measured only on the zeros is not taken.
"""
from __future__ import annotations

import os
import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from . import cache
from .kernel import MODES, REQUESTS, SETUP_LOCK, Kernel, recording  # noqa: F401 - REQUESTS re-exported
from .sample import Samples, describe_shapes
JIT_OPTIONS: tuple[dict[str, Any] | None, ...] = ({"cpp_wrapper": True}, None)
"""Inductor's options ``jit`` tries in turn: its C++ wrapper (off the GIL), then its Python wrapper."""
DEFAULT_JOBS = 6000
"""Jobs expected when the caller does not say: a 10 Hz task for ten minutes."""
ZEROS = "the warm-up's zeros"
"""Where a record's figures come from when no bag's were measured (``figures``)."""


def default_request() -> str:
    """``$RT_RUNTIME_COMPILE`` (one of REQUESTS), else ``eager``: today's kernels, today's digest."""
    req = os.environ.get("RT_RUNTIME_COMPILE", "") or "eager"
    if req not in REQUESTS:
        raise ValueError(f"RT_RUNTIME_COMPILE: expected one of {', '.join(REQUESTS)}, found {req!r}")
    return req


def net_benefit(t_eager_s: float, t_compiled_s: float, calls: float, cost_s: float) -> float:
    """Seconds a compiled kernel saves over ``calls`` calls, less what building or loading it costs."""
    return (t_eager_s - t_compiled_s) * calls - cost_s


@dataclass
class Choice:
    """What set-up chose for one kernel, and the numbers it chose by (seconds; None: not measured)."""

    kernel: str
    requested: str
    mode: str
    calls: float
    t_eager: float | None = None
    t: dict[str, float] = field(default_factory=dict)
    cost: dict[str, float] = field(default_factory=dict)
    bit_equal: dict[str, bool] = field(default_factory=dict)
    net: dict[str, float] = field(default_factory=dict)
    why: str = ""
    inputs: str = ZEROS
    probe: dict[str, Any] = field(default_factory=dict)
    """Where the bag's arguments were measured: the warm-up zeros' figures, not used (t_eager, t, bit_equal, mode)."""
    shapes: list[Any] = field(default_factory=list)


def figures(rec: dict[str, Any], real: bool = True) -> dict[str, Any]:
    """The numbers ``pick`` reads from a record: the bag's (``rec["real"]``) where measured, else the zeros'.

    With the bag's, a mode keeps its costs and error but loses the zeros' time and bits unless it was
    measured on the bag too: the zeros' figures are never mixed in. ``inputs`` says which."""
    got = rec.get("real") if real else None
    if not got:
        return {**rec, "inputs": ZEROS}
    modes = {}
    for m, r in rec.get("modes", {}).items():
        modes[m] = {k: v for k, v in r.items() if k not in ("t", "bit_equal")}
        modes[m].update(got.get("modes", {}).get(m, {}))
    return {"t_eager": got.get("t_eager"), "modes": modes, "inputs": got.get("inputs", "a bag")}


def pick(requested: str, rec: dict[str, Any], calls: float, built: set[str]) -> tuple[str, dict[str, float], str]:
    """The mode for one kernel from its record (``figures``): (mode, net benefit per measured mode, why). Pure."""
    view = figures(rec)
    modes, nets = view.get("modes", {}), {}
    t_e = view.get("t_eager")
    for m, r in modes.items():
        if t_e is not None and r.get("t") is not None:
            cost = r.get("load_s", r["build_s"]) if m in built else r["build_s"]
            nets[m] = net_benefit(t_e, r["t"], calls, cost)
    if requested != "auto":
        err = modes.get(requested, {}).get("error")
        return ("eager", nets, f"{requested} failed: {err}") if err else (requested, nets, "asked")
    fit = {m: n for m, n in nets.items() if n > 0 and modes[m].get("bit_equal")}
    if fit:
        best = max(sorted(fit), key=lambda m: fit[m])
        return best, nets, f"largest net benefit, bit-identical on {view['inputs']}"
    failed = "; ".join(f"{m} failed: {r['error']}" for m, r in sorted(modes.items()) if "error" in r)
    if not nets:
        zeros_only = sorted(m for m, r in modes.items() if "error" not in r and "t" not in r)
        if view["inputs"] != ZEROS and zeros_only:
            return "eager", nets, (f"{', '.join(zeros_only)} measured on {ZEROS} only, not used "
                                   "(rt-runtime compile --bag measures it)" + (f"; {failed}" if failed else ""))
        return "eager", nets, failed or "no compiled mode measured (rt-runtime compile --build measures)"
    return "eager", nets, "no bit-identical mode with a positive net benefit" + (f"; {failed}" if failed else "")


# ---- building, loading and measuring (set-up only) ----

def _clone(args: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        if a.is_floating_point():
            return bool(((a == b) | (a.isnan() & b.isnan())).all())
        return torch.equal(a, b)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and (a == b or a != a)


def bit_equal(k: Kernel, impl: Callable[..., Any], args: tuple[Any, ...]) -> bool:
    """Whether ``impl`` writes and returns what the Python body does on copies of ``args``."""
    want, got = _clone(args), _clone(args)
    with torch.inference_mode():   # as an executor runs them (exec/executor.py)
        r_want, r_got = k.py(*want), impl(*got)
    return _same(r_want, r_got) and all(_same(x, y) for x, y in zip(want, got))


def per_call(fn: Callable[..., Any], args: tuple[Any, ...], budget_s: float = 0.2) -> float:
    """Median seconds of one call of ``fn`` on copies of ``args`` (a few batches within ``budget_s``)."""
    return per_call_over(fn, [args], budget_s)


def per_call_over(fn: Callable[..., Any], argsets: list[tuple[Any, ...]], budget_s: float = 0.2) -> float:
    """Median seconds of one call of ``fn`` over copies of ``argsets`` in turn (a few batches within ``budget_s``)."""
    work = [_clone(a) for a in argsets]
    with torch.inference_mode():   # as an executor runs it (exec/executor.py)
        t0 = time.perf_counter()
        for a in work:
            fn(*a)
        once = max((time.perf_counter() - t0) / len(work), 1e-7)
        n = max(1, min(200, int(budget_s / 5 / once / len(work))))
        batches = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                for a in work:
                    fn(*a)
            batches.append((time.perf_counter() - t0) / (n * len(work)))
    return statistics.median(batches)


def measure_real(k: Kernel, rec: dict[str, Any], impls: dict[str, Callable[..., Any]],
                 argsets: list[tuple[Any, ...]], inputs: str) -> bool:
    """Time ``k`` eager and in each mode of ``impls`` on ``argsets`` (recorded from a bag) into ``rec["real"]``.

    A compiled call runs as in a job: under ``eager_on_recompile``, so a shape its guards refuse runs the
    Python body, as it would live. Modes already measured on the same inputs are kept. True: changed."""
    real = rec.get("real")
    if not real or real.get("inputs") != inputs or len(real.get("shapes", ())) != len(argsets):
        real = rec["real"] = {"inputs": inputs, "shapes": describe_shapes(argsets), "modes": {},
                              "t_eager": per_call_over(k.py, argsets)}
        changed = True
    else:
        changed = False
    for m, impl in impls.items():
        if m in real["modes"]:
            continue
        with torch.compiler.set_stance("eager_on_recompile"):
            real["modes"][m] = {"t": per_call_over(impl, argsets),
                                "bit_equal": all(bit_equal(k, impl, a) for a in argsets)}
        changed = True
    return changed


class AotKernel:
    """An AOTInductor package for one call signature; any other shapes or scalars run the Python body."""

    def __init__(self, k: Kernel, package: Any, args: tuple[Any, ...], returns: bool) -> None:
        self.py, self.package, self.fallbacks, self.returns = k.py, package, 0, returns
        self.sig = tuple(tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args)
        self.tensor_at = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))

    def __call__(self, *args: Any) -> Any:
        sig = self.sig
        if len(args) != len(sig) or any((tuple(a.shape) if isinstance(a, torch.Tensor) else a) != s
                                        for a, s in zip(args, sig)):
            self.fallbacks += 1
            return self.py(*args)
        out = self.package(*(args[i] for i in self.tensor_at))
        return out[0] if self.returns else None


class _Bound(torch.nn.Module):
    """A kernel's call with its scalars fixed, tensors as the only inputs: what ``torch.export`` takes."""

    def __init__(self, k: Kernel, args: tuple[Any, ...]) -> None:
        super().__init__()
        self.fn, self.args = k.py, args
        self.tensor_at = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]

    def forward(self, *tensors: torch.Tensor) -> Any:
        full = list(self.args)
        for i, t in zip(self.tensor_at, tensors):
            full[i] = t
        r = self.fn(*full)
        return (r,) if r is not None else (tensors[0],)


def _build(k: Kernel, mode: str, args: tuple[Any, ...], key: str) -> Callable[..., Any]:
    """``k`` built (or loaded from the cache) in ``mode``, and called once on copies of ``args``."""
    with torch.compiler.set_stance("default"), warnings.catch_warnings():
        # Inductor's own imports call TorchScript's script_method, which warns of its deprecation: not ours
        warnings.filterwarnings("ignore", message=r".*torch\.jit\..* is deprecated", category=DeprecationWarning)
        if mode == "jit":
            # The C++ wrapper first: it releases the GIL around the compiled code (Inductor's
            # codegen/cpp_wrapper_cpu.py), the Python wrapper holds it between kernels; it "does not
            # support everything": what it refuses gets the Python wrapper.
            for options in JIT_OPTIONS:
                try:
                    impl = torch.compile(k.py, dynamic=True, options=options)
                    # compiles now, at set-up, in inference mode: Dynamo guards on it, and an executor runs
                    # its ops in it (a graph compiled outside would run eager there, eager_on_recompile)
                    with torch.inference_mode():
                        impl(*_clone(args))
                    return impl
                except Exception:  # noqa: BLE001 - the Python wrapper's error is the one reported
                    if options is None:
                        raise
        path = cache.artifact(key, mode)
        if not path.exists():
            bound = _Bound(k, args)
            tensors = tuple(args[i] for i in bound.tensor_at)
            ep = torch.export.export(bound, _clone(tensors))
            tmp = path.with_suffix(f".{os.getpid()}.tmp.pt2")
            torch._inductor.aoti_compile_and_package(ep, package_path=str(tmp))
            os.replace(tmp, path)
        try:
            package = torch._inductor.aoti_load_package(str(path))
        except Exception as e:  # noqa: BLE001 - a package that does not load is rebuilt once
            cache.note(f"{path}: does not load ({type(e).__name__}): rebuilt")
            path.unlink(missing_ok=True)
            return _build(k, mode, args, key)
        impl = AotKernel(k, package, args, k.py(*_clone(args)) is not None)
        impl(*_clone(args))
        return impl


def _first_line(e: BaseException) -> str:
    text = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {text[:160]}"


def _measure_recorded(k: Kernel, rec: dict[str, Any], impls: dict[str, Callable[..., Any]], args: tuple[Any, ...],
                      key: str, real: Samples) -> bool:
    """``measure_real`` for every mode the record built, loading (and timing the load of) those not loaded."""
    done = rec.get("real", {}).get("modes", {}) if rec.get("real", {}).get("inputs") == real.source else {}
    for m, r in rec["modes"].items():
        if "t" in r and m not in impls and m not in done:
            t0 = time.perf_counter()
            try:
                impls[m] = _build(k, m, args, key)
                r["load_s"] = time.perf_counter() - t0
            except Exception as e:  # noqa: BLE001 - measured as it runs: not at all
                cache.note(f"kernel {k.name}: {m} failed to load ({_first_line(e)}): not measured on {real.source}")
    return measure_real(k, rec, impls, real.args[k.name], real.source)


def _choice(k: Kernel, requested: str, rec: dict[str, Any], calls: float, nets: dict[str, float], why: str) -> Choice:
    """What ``prepare`` reports for ``k``: the figures it chose by, and the zeros' beside where a bag's were used."""
    def cols(view: dict[str, Any]) -> tuple[dict[str, float], dict[str, bool]]:
        ms = view["modes"]
        return ({m: r["t"] for m, r in ms.items() if "t" in r},
                {m: bool(r.get("bit_equal")) for m, r in ms.items() if "t" in r})
    view = figures(rec)
    t, bits = cols(view)
    c = Choice(k.name, requested, k.mode, calls, view.get("t_eager"), t,
               {m: r.get("load_s", r["build_s"]) for m, r in rec["modes"].items()}, bits, nets, why, view["inputs"])
    if view["inputs"] != ZEROS:
        zeros = {x: v for x, v in rec.items() if x != "real"}
        zt, zbits = cols(figures(zeros))
        c.probe = {"t_eager": rec.get("t_eager"), "t": zt, "bit_equal": zbits,
                   "mode": pick(requested, zeros, calls, set(rec["modes"]))[0]}
        c.shapes = rec["real"].get("shapes", [])
    return c


def prepare(seen: dict[Kernel, list[Any]], requested: str, jobs: float, runs: int, device: str,
            build: bool = False, real: Samples | None = None) -> list[Choice]:
    """Choose, build or load and install each recorded kernel's mode (``runs``: the recorded jobs).

    ``build``: measure every mode not measured yet (``rt-runtime compile``), whatever is asked. ``real``:
    arguments recorded from a bag (``exec/sample.py``): each kernel with some is also measured on them,
    eager and in every mode built (loaded where needed), and ``auto`` then chooses by those numbers."""
    if requested not in REQUESTS:
        raise ValueError(f"compile: expected one of {', '.join(REQUESTS)}, found {requested!r}")
    out = []
    cache.use_inductor_cache()
    with SETUP_LOCK:
        for k, (args, n) in seen.items():
            calls = jobs * n / max(runs, 1)
            if requested == "eager" and not build:
                k.use("eager", k.py)
                out.append(Choice(k.name, requested, "eager", calls, why="asked"))
                continue
            key = cache.key(k, args, device)
            rec = cache.load_record(key) or {"kernel": k.name, "modes": {}}
            todo = [m for m in ("jit", "aot") if (build or m == requested) and "error" not in rec["modes"].get(m, {})]
            impls: dict[str, Callable[..., Any]] = {}
            dirty = False
            recorded = real.args.get(k.name) if real is not None else None
            if rec.get("t_eager") is None and (todo or recorded):   # the zeros' too: --explain shows the gap
                rec["t_eager"], dirty = per_call(k.py, args), True
            for m in todo:
                r = rec["modes"].get(m)
                fresh = r is None or "t" not in r or (m == "aot" and not cache.artifact(key, m).exists())
                t0 = time.perf_counter()
                try:
                    impls[m] = _build(k, m, args, key)
                except Exception as e:  # noqa: BLE001 - a kernel a compiler refuses runs eager
                    rec["modes"][m], dirty = {"error": _first_line(e), "build_s": time.perf_counter() - t0}, True
                    cache.note(f"kernel {k.name}: {m} failed ({_first_line(e)}): eager")
                    continue
                took = time.perf_counter() - t0
                if fresh:
                    rec["modes"][m] = {"build_s": took, "t": per_call(impls[m], args),
                                       "bit_equal": bit_equal(k, impls[m], args)}
                    cache.note(f"kernel {k.name}: {m} built in {took:.1f} s")
                else:
                    r["load_s"] = took
                dirty = True
            if recorded:
                dirty = _measure_recorded(k, rec, impls, args, key, real) or dirty
            if requested == "auto":   # load what it chooses among the measured modes
                mode, _, _ = pick(requested, rec, calls, set(rec["modes"]))
                if mode != "eager" and mode not in impls:
                    try:
                        impls[mode] = _build(k, mode, args, key)
                    except Exception as e:  # noqa: BLE001
                        cache.note(f"kernel {k.name}: {mode} failed to load ({_first_line(e)}): eager")
            if dirty:
                cache.save_record(key, rec)
            mode, nets, why = pick(requested, rec, calls, set(rec["modes"]))
            if mode != "eager" and mode not in impls:
                mode, why = "eager", f"{mode} not loaded"
            k.use(mode, impls.get(mode, k.py))
            out.append(_choice(k, requested, rec, calls, nets, why if k.mode == mode else "RT_RUNTIME_EAGER_KERNELS"))
        if any(c.mode == "jit" for c in out):
            torch.compiler.set_stance("eager_on_recompile")   # from here on nothing compiles in a job
    return out


def compile_graph(executor: Any, inputs: dict[str, Any], requested: str, jobs: float = DEFAULT_JOBS,
                  runs: int = 2, build: bool = False, real: Samples | None = None) -> list[Choice]:
    """Run ``runs`` jobs of ``executor`` on ``inputs`` recording its kernels, then ``prepare`` them."""
    with recording() as seen:
        for _ in range(runs):
            executor.run(inputs)
    executor.device.synchronize()
    return prepare(seen, requested, jobs, runs, executor.device.name, build, real)
