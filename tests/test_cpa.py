"""Event-chain analysis (analysis/cpa.py, offsets.py, e2e.py): event models by hand, and the holistic bounds
held against the independent simulator in ``sched_sim`` over random task sets, offsets and chains.

Times are integer nanoseconds with 1 ns as the unit and small periods, so hyperperiods stay short."""
import math

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from rt_runtime.analysis.cpa import Activation, EventModel, and_join, holistic, shaped
from rt_runtime.analysis.e2e import analyze_system
from rt_runtime.analysis.offsets import pattern_model, trigger_releases
from rt_runtime.core import Task
from rt_runtime.core.chain import Chain
from sched_sim import make_jobs, periodic, simulate, simulate_precedence

PERIODS = [4, 5, 6, 8, 10, 12]


def T(name, period, wcet, deadline=None, **kw):
    return Task(name, period, wcet, deadline, **kw)


# ---- event models by hand ------------------------------------------------------------------------
def test_pjd_model_counts_and_distances():
    m = EventModel(10, 3, 4)
    assert [m.eta_plus(w) for w in (0, 1, 4, 5, 8, 17, 18)] == [0, 1, 1, 1, 2, 2, 3]
    burst = EventModel(10, 15, 4)     # the jitter allows a burst; the minimum distance spaces it out
    assert [burst.eta_plus(w) for w in (1, 4, 5, 9)] == [1, 1, 2, 3]
    assert (m.delta_min(1), m.delta_min(2), m.delta_min(3)) == (0, 7, 17)
    assert m.widened(5) == EventModel(10, 8, 0)


def test_min_interarrival_shapes_a_jittery_stream():
    # 100 +- 30 held to 80 apart: the second event may come 70 after the first and waits 10
    out, delay, coalesce = shaped(EventModel(100, 30, 0), 80)
    assert (delay, coalesce) == (10, False) and out == EventModel(100, 40, 80)
    assert shaped(EventModel(50), 60)[2]                       # faster than the runtime releases: coalesces
    assert shaped(EventModel(100, 0, 100), 60)[:2] == (EventModel(100, 0, 100), 0)
    # a join of unrelated streams: the slowest input, waiting up to a period of the other
    assert and_join([EventModel(100, 5), EventModel(120, 0)]) == EventModel(120, 105, 0)


def test_trigger_releases_follow_the_scheduler():
    assert trigger_releases([[0, 100, 200]], "trigger", 60).tolist() == [0, 100, 200]
    # 10 and 20 arrive while a release is pending (held to 60 by min_interarrival): they coalesce into it
    assert trigger_releases([[0, 10, 20, 100]], "trigger", 60).tolist() == [0, 60, 120]
    # all: once each input has a new message; any: on each
    assert trigger_releases([[0, 100, 200], [50, 250]], "all", 1).tolist() == [50, 250]
    assert trigger_releases([[0, 100, 200], [50, 250]], "any", 1).tolist() == [0, 50, 100, 200, 250]
    import numpy as np

    p, j, d, n = pattern_model(np.array([0, 100, 230, 300, 400, 530, 600]), 0, 300)
    assert (p, j, d, n) == (100, 30, 70, 3)


# ---- EDF with release offsets against the simulator ---------------------------------------------
periodic_sets = st.lists(st.tuples(st.sampled_from(PERIODS), st.integers(1, 60), st.integers(40, 200),
                                   st.integers(0, 11)), min_size=2, max_size=4)
# Tasks of one or two harmonic periods, phased apart, with tight deadlines: where the offsets decide.
phased_sets = st.lists(st.tuples(st.sampled_from([6, 12]), st.integers(10, 45), st.integers(25, 100),
                                 st.integers(0, 11)), min_size=2, max_size=4)
light_sets = st.lists(st.tuples(st.sampled_from(PERIODS), st.integers(1, 25), st.integers(60, 200),
                                st.integers(0, 11)), min_size=1, max_size=3)


def _tasks(params):
    out = []
    for k, (p, cpct, dpct, off) in enumerate(params):
        c = max(1, p * cpct // 100)
        out.append(T(f"t{k}", p, c, max(c, p * dpct // 100), offset_ns=off % p))
    return out


def _edf_misses(tasks, arrivals, horizon):
    jobs = make_jobs([t.wcet_ns for t in tasks], [t.deadline for t in tasks], arrivals,
                     ops=[[1] * t.wcet_ns for t in tasks])
    simulate(jobs, key=lambda j: (j["deadline"], j["task"]), horizon=horizon + 400)
    return jobs, {tasks[j["task"]].name for j in jobs
                  if j["deadline"] <= horizon and (j["finish"] is None or j["finish"] > j["deadline"])}


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(periodic_sets, phased_sets))
def test_edf_with_offsets_is_exact_for_periodic_sets(params):
    # Concrete periodic tasks, preemptive EDF, deadlines up to 2 T: the demand test over the windows the
    # offsets allow says schedulable iff the simulated schedule never misses, and names every task that does.
    tasks = _tasks(params)
    u = sum(t.wcet_ns / t.period_ns for t in tasks)
    assume(u <= 1)
    H = math.lcm(*(t.period_ns for t in tasks))
    horizon = max(t.offset_ns for t in tasks) + 4 * H + 2 * max(t.deadline for t in tasks)
    jobs, missed = _edf_misses(tasks, [periodic(t.period_ns, t.offset_ns, horizon) for t in tasks], horizon)
    h = holistic(tasks, "edf")
    assert h.schedulable == (not missed), (missed, h.workers)
    assert missed <= {t.name for t in h.timings if not t.schedulable}
    for k, t in enumerate(h.timings):   # Spuri's bounds (deadlines beyond the period too), or D
        if t.response_ns is not None:
            assert all(j["finish"] - j["arrival"] <= t.response_ns for j in jobs if j["task"] == k and
                       j["deadline"] <= horizon)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(periodic_sets, phased_sets), st.randoms(use_true_random=False))
def test_fixed_priority_offsets_bound_the_simulated_responses(params, rnd):
    # Preemptive fixed priorities, phased timers: every response time the analysis gives (the lower of the
    # worst phasing's and the offsets') bounds what the simulator shows, and a task it calls safe never misses.
    tasks = _tasks(params)
    prio = list(range(len(tasks)))
    rnd.shuffle(prio)
    tasks = [Task(t.name, t.period_ns, t.wcet_ns, t.deadline, offset_ns=t.offset_ns, priority=p)
             for t, p in zip(tasks, prio)]
    assume(sum(t.wcet_ns / t.period_ns for t in tasks) <= 1)
    H = math.lcm(*(t.period_ns for t in tasks))
    horizon = max(t.offset_ns for t in tasks) + 4 * H + 2 * max(t.deadline for t in tasks)
    jobs = make_jobs([t.wcet_ns for t in tasks], [t.deadline for t in tasks],
                     [periodic(t.period_ns, t.offset_ns, horizon) for t in tasks], ops=[[1] * t.wcet_ns for t in tasks])
    simulate(jobs, key=lambda j: tasks[j["task"]].priority, horizon=horizon + 400)
    rep = analyze_system(tasks, "fp")
    for k, r in enumerate(rep.tasks):
        mine = [j for j in jobs if j["task"] == k and j["arrival"] < horizon - 2 * max(t.deadline for t in tasks)]
        if r.response_ns is not None:
            assert all(j["finish"] is not None and j["finish"] - j["arrival"] <= r.response_ns for j in mine), r
        if r.schedulable:
            assert all(j["finish"] <= j["deadline"] for j in mine)


# ---- LET: a task released by another's publish ----------------------------------------------------
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.sampled_from(PERIODS), st.integers(1, 2), st.integers(1, 2), st.integers(50, 100), st.integers(50, 200),
       light_sets)
def test_let_triggered_reader_bound_holds_in_simulation(p, ca, cb, da_pct, db_pct, others):
    # A periodic writer A, B released by A's LET publish (r_A + D_A), other periodic tasks beside them:
    # whenever the analysis says schedulable, nothing misses, and A's release to B's finish stays within
    # the chain's response bound (and B's publish within its chain-LET bound).
    da, db = max(ca, p * da_pct // 100), max(cb, p * db_pct // 100)
    a, b = T("A", p, ca, da), T("B", p, cb, db, trigger="a_out")
    tasks = [a, b, *_tasks(others)]
    assume(sum(t.wcet_ns / t.period_ns for t in tasks) <= 1)
    acts = {"B": Activation("trigger", ("A",))}
    chain = Chain("a_to_b", ("A", "B"))
    rep = analyze_system(tasks, "edf", [chain], acts)
    assume(rep.schedulable)
    H = math.lcm(*(t.period_ns for t in tasks))
    horizon = 4 * H + 2 * max(t.deadline for t in tasks) + 12
    rel_a = periodic(p, 0, horizon)
    arrivals = [rel_a, [r + da for r in rel_a], *[periodic(t.period_ns, t.offset_ns, horizon) for t in tasks[2:]]]
    jobs, missed = _edf_misses(tasks, arrivals, horizon)
    assert not missed
    b_jobs = [j for j in jobs if j["task"] == 1 and j["deadline"] <= horizon]
    bound = rep.chains[0]
    worst = max(j["finish"] - (j["arrival"] - da) for j in b_jobs)
    assert worst <= bound.response_ns <= bound.chain_let_ns == da + db


# ---- fixed priorities: a run-time chain, members released by their predecessor's finish ---------
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.sampled_from([8, 10, 12]), st.lists(st.integers(1, 2), min_size=2, max_size=3),
       st.integers(60, 100), light_sets, st.randoms(use_true_random=False))
def test_chain_response_with_propagated_jitter_holds_in_simulation(p, costs, d_pct, others, rnd):
    # Holistic RTA (Tindell & Clark): member k's release jitter is member k-1's response time, iterated
    # to a fixed point. Preemptive fixed priorities in the simulator, the chain's members released at their
    # predecessor's finish: each instance ends within the chain's response bound.
    members = [T(f"m{k}", p, c) for k, c in enumerate(costs)]
    rest = _tasks(others)
    tasks = members + [T(t.name, t.period_ns, t.wcet_ns, t.deadline, offset_ns=t.offset_ns) for t in rest]
    prio = list(range(len(tasks)))
    rnd.shuffle(prio)
    tasks = [Task(t.name, t.period_ns, t.wcet_ns, t.deadline, offset_ns=t.offset_ns, priority=pr)
             for t, pr in zip(tasks, prio)]
    d = max(sum(costs), p * d_pct // 100)
    chain = Chain("c", tuple(m.name for m in members), d)
    assume(sum(t.wcet_ns / t.period_ns for t in tasks) <= 1)
    rep = analyze_system(tasks, "fp", [chain])
    assume(rep.chains[0].response_ns is not None)
    H = math.lcm(*(t.period_ns for t in tasks))
    horizon = 4 * H + 40
    jobs = []
    heads = periodic(p, 0, horizon)
    for i, r in enumerate(heads):
        prev = None
        for k, m in enumerate(members):
            j = {"task": k, "k": i, "arrival": r, "release": r, "deadline": r + d, "ops": [1] * m.wcet_ns,
                 "finish": None, "after": prev, "prio": tasks[k].priority}
            jobs.append(j)
            prev = j
    for t in tasks[len(members):]:
        for i, r in enumerate(periodic(t.period_ns, t.offset_ns, horizon)):
            jobs.append({"task": t.name, "k": i, "arrival": r, "release": r, "deadline": r + t.deadline,
                         "ops": [1] * t.wcet_ns, "finish": None, "prio": t.priority})
    simulate_precedence(jobs, key=lambda j: j["prio"], horizon=horizon + 200)
    last = len(members) - 1
    ends = [j["finish"] - j["arrival"] for j in jobs if j["task"] == last and j["arrival"] < 3 * H]
    assert all(e is not None for e in ends) and max(ends) <= rep.chains[0].response_ns
    for t in rep.tasks:
        if t.name.startswith("t") and t.schedulable:
            worst = max((j["finish"] - j["release"] for j in jobs if j["task"] == t.name and j["arrival"] < 3 * H),
                        default=0)
            assert worst <= t.response_ns


def test_a_phased_set_at_u_089_that_runs_clean_is_not_rejected():
    # Three 10 ms timers phased 3 ms apart with tight deadlines, and a 100 ms task with D > T: the worst
    # phasing (all released at once) needs 9 ms within 3 ms and rejects it; with the offsets each window
    # holds one job. The runtime's own dispatcher (virtual clock, synthetic ops) runs it without a miss.
    from rt_runtime.analysis import analyze_taskset
    from dispatch_oracle import simulate as run_dispatcher

    ms = 1_000_000
    tasks = [T("a", 10 * ms, 3 * ms, 3 * ms), T("b", 10 * ms, 3 * ms, 3 * ms, offset_ns=3 * ms),
             T("c", 10 * ms, 2_800_000, 4 * ms, offset_ns=6 * ms), T("d", 100 * ms, ms, 150 * ms)]
    assert round(sum(t.utilization for t in tasks), 3) == 0.89
    assert not analyze_taskset(tasks, "edf").schedulable
    rep = analyze_system(tasks, "edf")
    assert rep.schedulable and rep.bounds["worker0"]["edf_offsets"]["passes"]
    run = run_dispatcher(tasks, "edf", horizon_ns=400 * ms)
    assert not run.misses and all(run.worst_response(t.name) <= t.response_ns for t in rep.tasks)


def test_a_publish_on_finish_passes_its_response_on_as_jitter():
    # A publishes when it finishes (up to R_A after its release), so B, released by it, inherits the jitter
    # R_A - R_min (R_min = 0); under LET B's releases are pinned at A's release + D_A instead, jitter-free.
    tasks = [T("A", 10, 2, 10, priority=1), T("B", 5, 1, 10, trigger="a_out", priority=2), T("H", 10, 3, 4, priority=0)]
    acts = {"B": Activation("trigger", ("A",))}
    finish = holistic(tasks, "fp", activations=acts, on_finish={"A": True})
    by = {t.name: t for t in finish.timings}
    assert by["A"].response_ns == 5 and by["B"].release.model.jitter_ns == 5   # R_A = C_H + C_A
    assert by["B"].release.model.period_ns == 10 and by["B"].release.times is None   # A's rate, not B's 5
    let = {t.name: t for t in holistic(tasks, "fp", activations=acts).timings}
    assert let["B"].release.model.jitter_ns == 0 and let["B"].release.times is not None
