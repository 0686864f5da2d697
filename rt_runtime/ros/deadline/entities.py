"""What the DeadlineExecutor needs to know of rclpy's entities and tasks: names, dropping, suspension."""
from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Iterator

from rclpy.client import Client
from rclpy.exceptions import InvalidHandle
from rclpy.service import Service
from rclpy.subscription import Subscription
from rclpy.task import Future, Task
from rclpy.timer import Timer

from ...core.units import format_duration
from .jobs import Callback, Job


def describe(entity: Any) -> tuple[str, str | int | None, str]:
    """(kind, selector key, name part) of an rclpy entity."""
    if isinstance(entity, Timer):
        p = entity.timer_period_ns
        return "timer", p, f"timer:{format_duration(p)}"
    if isinstance(entity, Subscription):
        return "subscription", entity.topic_name, f"sub:{entity.topic_name}"
    if isinstance(entity, Service):
        return "service", entity.srv_name, f"srv:{entity.srv_name}"
    if isinstance(entity, Client):
        return "client", entity.srv_name, f"client:{entity.srv_name}"
    if entity is None:
        return "task", None, "task"
    return "waitable", type(entity).__name__, f"waitable:{type(entity).__name__}"


def drop(job: Job) -> None:
    """Forget a queued job: its entity is waited on again, its handler's coroutine closed (never started)."""
    if job.entity is not None:
        job.entity._executor_event = False
    coro = getattr(job.handler, "_handler", None)
    if job.action != "cont" and hasattr(coro, "close"):
        coro.close()


def awaits_pending(task: Task) -> bool:
    """True when a suspended rclpy Task is awaiting a Future that is not done (rclpy polls such tasks every
    round; queued under their deadline they would starve the job that completes the future)."""
    obj = getattr(task, "_handler", None)
    for _ in range(64):   # handler -> the callback's coroutine -> ... -> the Future's __await__ generator
        nxt = getattr(obj, "cr_await", None) or getattr(obj, "gi_yieldfrom", None)
        if nxt is None:
            break
        obj = nxt
    frame = getattr(obj, "gi_frame", None)
    fut = frame.f_locals.get("self") if frame is not None else None
    return isinstance(fut, Future) and not fut.done()


def read_graph(cb: Callback, sub: Subscription, node: Any, now_ns: int) -> bool:
    """Look at the publishers of a subscription's topic (``Callback.graph``): their count (one C call), and
    when it changed their QoS deadlines (``get_publishers_info_by_topic``, tens of µs). True when the
    period they advertise changed."""
    try:
        count = sub.get_publisher_count()
    except InvalidHandle:
        return False

    def deadlines() -> list[int]:
        try:
            return [i.qos_profile.deadline.nanoseconds for i in node.get_publishers_info_by_topic(sub.topic_name)]
        except (InvalidHandle, RuntimeError):   # the node is being destroyed: look again later
            return []
    return cb.graph(now_ns, count, deadlines)


def take_message(sub: Subscription, cb: Callback | None) -> Any:
    """rclpy's ``_take_subscription``, which also books the message's arrival on ``cb`` (the middleware's
    receive time, else now); the coroutine it returns carries its arguments (``args``: what a degraded
    release hands the fallback). None when nothing was taken."""
    try:
        with sub.handle:
            info = sub.handle.take_message(sub.msg_type, sub.raw)
    except Exception:  # noqa: BLE001 - rclpy's InvalidHandle: the subscription was destroyed
        return None
    if info is None:
        return None
    if cb is not None:
        received = info[1].get("received_timestamp") if len(info) > 1 and info[1] else None
        cb.arrival(int(received) if received else time.monotonic_ns())
    args = (info[0],) if sub._callback_type is Subscription.CallbackType.MessageOnly else tuple(info)

    async def _execute() -> None:
        r = sub.callback(*args)
        if hasattr(r, "__await__"):
            await r
    _execute.args = args   # type: ignore[attr-defined]
    return _execute


def due_timers(nodes: Iterable[Any]) -> Iterator[tuple[Timer, Any]]:
    """The nodes' timers that have expired and are not queued (one C call a timer), whose group may run."""
    for node in nodes:
        for tmr in node.timers:
            if tmr._executor_event or tmr.callback_group is None:
                continue
            try:
                with tmr.handle:
                    ready = tmr.handle.is_timer_ready()
            except InvalidHandle:
                continue
            if ready and tmr.callback_group.can_execute(tmr):
                yield tmr, node


def run_direct(job: Job) -> None:
    """Run a job whose message was taken ahead (``job.args``), without an rclpy handler: what the handler does
    for a plain callback (the group's beginning and ending execution around the call), with the job's
    reaction (skip: not called; degrade: the fallback; abort: dropped)."""
    sub, args = job.entity, job.args
    g = sub.callback_group
    sub._executor_event = False   # back in the wait set (a handler's take does this)
    job.took = True
    if job.action == "abort" or (g is not None and not g.beginning_execution(sub)):
        return   # a taken group: not under one worker, which checked it at the pick
    try:
        if job.action == "none":
            sub.callback(*args)
        elif job.action == "skip":
            job.cb.skipped += 1
        elif job.action == "degrade":
            job.cb.degraded += 1
            job.cb.timing.fallback(*args)
    finally:
        if g is not None:
            g.ending_execution(sub)


def take_for(job: Job, take: Callable[[Any], Any], entity: Any) -> Any:
    """Take the entity's data (rclpy's ``_take_*``) for ``job``'s handler: then run the callback, nothing (skip,
    abort), or its fallback (degrade); a service's request is always answered, a client's response always
    delivered."""
    coro = take(entity)
    job.took = coro is not None
    if job.action == "none" or job.cb.kind not in ("timer", "subscription"):
        return coro
    if coro is None or job.action == "abort":
        return None
    if job.action == "skip":
        job.cb.skipped += 1
        return None
    job.cb.degraded += 1
    fallback, args = job.cb.timing.fallback, getattr(coro, "args", ())

    async def degraded() -> None:
        fallback(*args)
    return degraded


def realtime_worker(rt: Any, w: int) -> None:
    """SCHED_FIFO and pinning for worker ``w`` as the file's ``realtime:`` says (``sched.threads``)."""
    if rt is None or not rt.enabled:
        return
    from ...sched.threads import make_realtime
    cpus = [rt.cpus[w % len(rt.cpus)]] if rt.cpus else None
    make_realtime(cpus, rt.priority, f"deadline executor worker {w}")
