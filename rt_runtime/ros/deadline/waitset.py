"""The DeadlineExecutor's wait loop: rclpy's ``Executor._wait_for_ready_callbacks``, with its contract, cheaper.

On a graph of many nodes rclpy's loop costs milliseconds of Python per wait (docs/BENCHMARKS.md, the
profile): for every entity of every node it asks the callback group (a lock, a weak reference and a
set lookup per entity), enters the handle through an ``ExitStack``, and after the wait looks each
node's entities up in the ready *lists*. This loop yields the same things in the same cases (tasks
in progress first, then one wait's ready waitables, timers, subscriptions, guard conditions, clients
and services, each through ``Executor._make_handler``; the same exceptions on timeout, shutdown and
condition), but asks a Mutually-exclusive or Reentrant group once per wait (their answer does not
depend on the entity), enters handles directly, and looks pointers up in sets. A group is asked
again before each ready entity is yielded, as rclpy does.
"""
from __future__ import annotations

from typing import Any, Callable, Iterator

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.exceptions import InvalidHandle
from rclpy.executors import (ConditionReachedException, ExternalShutdownException, ShutdownException,
                             TimeoutException, TimeoutObject)
from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy
from rclpy.timer import Timer
from rclpy.utilities import timeout_sec_to_nsec
from rclpy.waitable import NumberOfEntities

_PLAIN = (MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup)   # can_execute ignores the entity


def wait_ready(ex: Any, timeout_sec: Any = None, nodes: list | None = None,
               condition: Callable[[], bool] = lambda: False) -> Iterator[tuple]:
    """Yield ``(handler, entity, node)`` for the work that is ready (``Executor._wait_for_ready_callbacks``)."""
    timeout_nsec = timeout_sec_to_nsec(timeout_sec.timeout if isinstance(timeout_sec, TimeoutObject) else timeout_sec)
    timeout_timer = Timer(None, None, timeout_nsec, ex._clock, context=ex._context) if timeout_nsec > 0 else None
    yielded = False
    while not yielded:
        consume_guard(ex)   # first: what triggers it from now on is seen by this pass's wait
        if ex._is_shutdown or condition():
            break
        use = nodes if nodes is not None else ex.get_nodes()
        with ex._tasks_lock:
            tasks = list(ex._tasks)
        if tasks:
            for task, entity, node in tasks:
                if not task.executing() and not task.done() and (node is None or node in use):
                    yielded = True
                    yield task, entity, node
            with ex._tasks_lock:
                ex._tasks = [t for t in ex._tasks if not t[0].done() and not t[0].cancelled()]

        asked: dict[int, bool] = {}

        def free(e: Any) -> bool:
            if e._executor_event:
                return False
            g = e.callback_group
            if g is None:
                return False
            if type(g) in _PLAIN:
                r = asked.get(id(g))
                if r is None:
                    r = asked[id(g)] = g.can_execute(e)
                return r
            return g.can_execute(e)

        subs, timers, clients, services, guards, waitables = [], [], [], [], [], []
        for node in use:
            subs += [(e, node) for e in node.subscriptions if free(e)]
            timers += [(e, node) for e in node.timers if free(e)]
            clients += [(e, node) for e in node.clients if free(e)]
            services += [(e, node) for e in node.services if free(e)]
            waitables += [(e, node) for e in node.waitables if free(e)]
            for gc in node.guards:
                if free(gc):
                    if gc._executor_triggered:   # triggered but not handled: trigger again
                        gc.trigger()
                    guards.append((gc, node))
        extra_timers = [timeout_timer] if timeout_timer is not None else []
        extra_guards = [g for g in (ex._guard, ex._sigint_gc) if g]
        entered: list[Any] = []
        try:
            def enter(pairs: list) -> list:
                """(entity, node, handle) of each entity whose handle could be entered (its handle read once)."""
                kept = []
                for pair in pairs:
                    e, node = pair if isinstance(pair, tuple) else (pair, None)
                    h = e.handle
                    try:
                        h.__enter__()
                    except InvalidHandle:
                        continue
                    entered.append(h)
                    kept.append((e, node, h))
                return kept
            subs, clients, services, timers, guards = (enter(x) for x in (subs, clients, services, timers, guards))
            extra_timers, extra_guards = enter(extra_timers), enter(extra_guards)
            kept_w = []
            for pair in waitables:
                try:
                    pair[0].__enter__()
                except InvalidHandle:
                    continue
                entered.append(pair[0])
                kept_w.append(pair)
            waitables = kept_w
            if ex._context.handle is None:
                raise RuntimeError('Cannot enter context if context is None')
            ex._context.handle.__enter__()
            entered.append(ex._context.handle)
            count = NumberOfEntities(len(subs), len(guards) + len(extra_guards), len(timers) + len(extra_timers),
                                     len(clients), len(services))
            for w, _ in waitables:
                count += w.get_num_entities()
            ws = _rclpy.WaitSet(count.num_subscriptions, count.num_guard_conditions, count.num_timers,
                                count.num_clients, count.num_services, count.num_events, ex._context.handle)
            ws.clear_entities()
            for add, entries in ((ws.add_subscription, subs), (ws.add_client, clients), (ws.add_service, services),
                                 (ws.add_timer, timers), (ws.add_timer, extra_timers),
                                 (ws.add_guard_condition, guards), (ws.add_guard_condition, extra_guards)):
                for _, _, h in entries:
                    add(h)
            for w, _ in waitables:
                w.add_to_wait_set(ws)
            ws.wait(timeout_nsec)
            if ex._is_shutdown:
                raise ShutdownException()
            if not ex._context.ok():
                raise ExternalShutdownException()
            subs_ready = set(ws.get_ready_entities('subscription'))
            guards_ready = set(ws.get_ready_entities('guard_condition'))
            timers_ready = set(ws.get_ready_entities('timer'))
            clients_ready = set(ws.get_ready_entities('client'))
            services_ready = set(ws.get_ready_entities('service'))
            # the ready sets are mostly empty: an entity's pointer is asked only when its kind has one ready
            for gc, _, h in (guards + extra_guards) if guards_ready else ():
                if h.pointer in guards_ready:
                    gc._executor_triggered = True
            for w, node in waitables:
                if w.is_ready(ws) and w.callback_group.can_execute(w):
                    yielded = True
                    yield ex._make_handler(w, node, ex._take_waitable), w, node
        finally:
            for h in reversed(entered):
                h.__exit__(None, None, None)

        for tmr, node, h in timers if timers_ready else ():
            if h.pointer in timers_ready and h.is_timer_ready() and tmr.callback_group.can_execute(tmr):
                yielded = True
                yield ex._make_handler(tmr, node, ex._take_timer), tmr, node
        for sub, node, h in subs if subs_ready else ():
            if h.pointer in subs_ready and sub.callback_group.can_execute(sub):
                yielded = True
                yield ex._make_handler(sub, node, ex._take_subscription), sub, node
        for gc, node, _ in guards:
            if gc._executor_triggered and gc.callback_group and gc.callback_group.can_execute(gc):
                yielded = True
                yield ex._make_handler(gc, node, ex._take_guard_condition), gc, node
        for cli, node, h in clients if clients_ready else ():
            if h.pointer in clients_ready and cli.callback_group.can_execute(cli):
                yielded = True
                yield ex._make_handler(cli, node, ex._take_client), cli, node
        for srv, node, h in services if services_ready else ():
            if h.pointer in services_ready and srv.callback_group.can_execute(srv):
                yielded = True
                yield ex._make_handler(srv, node, ex._take_service), srv, node
        if timeout_nsec == 0 or (timeout_timer is not None and timeout_timer.handle.pointer in timers_ready):
            raise TimeoutException()
    if ex._is_shutdown:
        raise ShutdownException()
    if condition():
        raise ConditionReachedException()


def consume_guard(ex: Any) -> None:
    """Clear the executor's guard condition with a wait on it alone (timeout 0). rclpy's handlers trigger it
    twice per callback (after the take, after the call) so that a waiting thread rebuilds its wait set;
    the thread that ran the callback rebuilds anyway, and the trigger left pending made its next full
    wait return at once, empty, and be rebuilt again: a second full wait per callback (docs/BENCHMARKS.md,
    idle). Safe to clear here, before the conditions are checked and the set is built: whatever was
    triggered before is in what follows, whatever is triggered after wakes the wait."""
    g = ex._guard
    if g is None:
        return
    try:
        with g.handle, ex._context.handle:
            ws = _rclpy.WaitSet(0, 1, 0, 0, 0, 0, ex._context.handle)
            ws.add_guard_condition(g.handle)
            ws.wait(0)
    except InvalidHandle:   # shut down meanwhile: the loop's checks say so
        pass
