"""What the DeadlineExecutor needs to know of rclpy's entities and tasks: names, dropping, suspension."""
from __future__ import annotations

from typing import Any

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
