"""The playback core (replay.control): bag time against wall time under pause, resume, rate, seek and steps."""
from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rt_runtime.replay import control as C
from rt_runtime.replay.controller import Controller

S = 1_000_000_000
START, END = 1_700_000_000 * S, 1_700_000_000 * S + 60 * S


def fresh(**kw) -> C.Playback:
    return C.begin(START, END, 1000, **kw)


def test_playing_bag_time_runs_at_the_rate_from_the_anchor_and_stops_at_the_end() -> None:
    pb = fresh(rate=2.0)
    assert C.position(pb, 1000) == START
    assert C.position(pb, 1000 + S) == START + 2 * S
    assert C.position(pb, 1000 + 100 * S) == END              # never past the range
    assert C.position(pb, 0) == START                          # a wall instant before the anchor
    assert C.wall_at(pb, START + 3 * S) == 1000 + S + S // 2
    assert C.wall_at(pb, START) == 1000


def test_a_pause_holds_bag_time_and_a_resume_continues_from_there() -> None:
    pb = C.pause(fresh(), 1000 + 5 * S)
    assert pb.paused and C.position(pb, 1000 + 50 * S) == START + 5 * S and C.wall_at(pb, END) is None
    pb = C.resume(pb, 1000 + 20 * S)
    assert not pb.paused and C.position(pb, 1000 + 21 * S) == START + 6 * S
    assert C.pause(C.pause(pb, 1000 + 22 * S), 1000 + 30 * S) == C.pause(pb, 1000 + 22 * S)  # idempotent
    assert C.resume(pb, 1000 + 99 * S) is pb


def test_a_rate_change_keeps_bag_time_continuous() -> None:
    pb = C.set_rate(fresh(), 1000 + 4 * S, 0.5)
    assert C.position(pb, 1000 + 4 * S) == START + 4 * S
    assert C.position(pb, 1000 + 6 * S) == START + 5 * S
    assert C.set_rate(pb, 1000 + 7 * S, 0.5) is pb   # the same rate changes nothing


@pytest.mark.parametrize("rate", [0, -1, 0.0009, 1000.1, float("nan"), float("inf"), "fast", None])
def test_a_rate_out_of_range_is_one_line_and_changes_nothing(rate) -> None:
    pb = fresh()
    with pytest.raises(C.ControlError) as e:
        C.apply(pb, C.Command("rate", rate), 2000)
    assert "rate: expected a number from 0.001 to 1000" in str(e.value) and "\n" not in str(e.value)


def test_a_seek_jumps_and_keeps_the_pause_and_counts() -> None:
    pb = C.pause(fresh(), 1000 + S)
    pb2 = C.seek(pb, 1000 + 2 * S, START + 30 * S)
    assert pb2.paused and C.position(pb2, 1000 + 9 * S) == START + 30 * S and pb2.seeks == pb.seeks + 1
    pb3 = C.seek(C.resume(pb2, 1000 + 10 * S), 1000 + 10 * S, START)
    assert C.position(pb3, 1000 + 11 * S) == START + S


@pytest.mark.parametrize("t", [START - 1, END + 1, 1.5, "12", None, True])
def test_a_seek_outside_the_range_or_not_an_instant_is_one_line(t) -> None:
    with pytest.raises(C.ControlError) as e:
        C.apply(fresh(), C.Command("seek", t), 2000)
    assert str(e.value).startswith("seek: expected a time") and "\n" not in str(e.value)


def test_a_relative_seek_stops_at_either_end() -> None:
    pb = fresh()
    assert C.position(C.seek_by(pb, 1000 + S, -10 * S), 1000 + S) == START
    assert C.position(C.seek_by(pb, 1000 + S, 100 * S), 1000 + S) == END
    assert C.position(C.apply(pb, C.Command("seek_by", 5 * S), 1000 + S), 1000 + S) == START + 6 * S


def test_steps_only_while_paused_and_each_holds_at_its_message() -> None:
    with pytest.raises(C.ControlError, match="play_next: playback is not paused"):
        C.step(fresh())
    pb = C.step(C.step(C.pause(fresh(), 1000)))
    assert pb.steps == 2
    pb = C.took_step(pb, 2000, START + 3 * S)
    assert pb.steps == 1 and C.position(pb, 10 * S) == START + 3 * S
    assert C.pause(pb, 3000).steps == 1 and C.resume(pb, 3000).steps == 0   # a resume drops the rest


def test_a_period_step_moves_a_paused_playback_by_one_period() -> None:
    pb = C.pause(fresh(period_ns=S // 10), 1000)
    pb = C.period(C.period(pb, 2000), 3000)
    assert C.position(pb, 99 * S) == START + S // 5 and pb.paused
    with pytest.raises(C.ControlError, match="play_period"):
        C.period(C.resume(pb, 4000), 4000)


def test_arrive_reanchors_where_the_consumer_is() -> None:
    pb = C.arrive(C.pause(fresh(), 1000 + S), 1000 + 3 * S, START + 2 * S)
    assert pb.paused and C.position(pb, 1000 + 9 * S) == START + 2 * S
    assert C.position(C.resume(pb, 1000 + 10 * S), 1000 + 11 * S) == START + 3 * S


def test_an_unknown_command_and_a_bad_range_are_one_line() -> None:
    with pytest.raises(C.ControlError, match="expected a command in pause, resume"):
        C.apply(fresh(), C.Command("rewind"), 0)
    with pytest.raises(C.ControlError, match="ends"):
        C.begin(10, 5, 0)


commands = st.one_of(
    st.sampled_from([C.Command(n) for n in ("pause", "resume", "toggle", "step", "period")]),
    st.builds(lambda r: C.Command("rate", r), st.floats(0.001, 1000)),
    st.builds(lambda t: C.Command("seek", t), st.integers(START, END)),
    st.builds(lambda d: C.Command("seek_by", d), st.integers(-80 * S, 80 * S)))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(commands, st.integers(0, 5 * S)), max_size=30), st.integers(0, 5 * S))
def test_any_sequence_keeps_bag_time_in_range_held_when_paused_monotone_without_seeks(script, probe) -> None:
    pb, wall = fresh(), 1000
    for cmd, dt in script:
        before_wall, before_pb = wall, pb
        wall += dt
        at = C.position(pb, wall)
        try:
            pb = C.apply(pb, cmd, wall)
        except C.ControlError:
            assert cmd.name in ("step", "period") and not pb.paused
            continue
        assert START <= C.position(pb, wall) <= END
        if cmd.name not in ("seek", "seek_by", "period"):
            assert C.position(pb, wall) == at                    # no command but a seek jumps
            assert pb.seeks == before_pb.seeks
        if cmd.name == "period":
            assert C.position(pb, wall) == min(END, at + pb.period_ns)
        if pb.paused:
            assert C.position(pb, wall + probe) == C.position(pb, wall)
            assert C.wall_at(pb, END) is None
        else:
            later = C.position(pb, wall + probe)
            assert later >= C.position(pb, wall)
            assert abs(later - min(END, C.position(pb, wall) + int(probe * pb.rate))) <= 1   # rounding
            target = min(END, C.position(pb, wall) + probe)
            w = C.wall_at(pb, target)
            assert w is not None and C.position(pb, w) >= target    # the loop never wakes early
            assert w == wall or C.position(pb, w - 1) <= target      # nor a nanosecond late
        assert pb.version >= before_pb.version and before_wall <= wall


def test_the_controller_wakes_a_waiting_loop_on_a_command_and_tells_its_listeners() -> None:
    ctl = Controller(fresh())
    heard = []
    ctl.listen(lambda pb, cmd: heard.append((pb.paused, cmd.name if cmd else None)))
    woke = threading.Event()

    def loop() -> None:
        ctl.wait(30)
        woke.set()
    t = threading.Thread(target=loop)
    t.start()
    time.sleep(0.05)
    ctl.command(C.Command("pause"))
    assert woke.wait(5)
    t.join()
    with pytest.raises(C.ControlError):
        ctl.command(C.Command("rate", 0))
    assert ctl.state.paused and heard == [(True, "pause")]


def test_step_and_wait_returns_once_the_loop_took_the_step() -> None:
    ctl = Controller(C.pause(fresh(), 0))
    took = []

    def loop() -> None:
        while not took:
            if ctl.take_step(START + 7 * S):
                took.append(1)
            ctl.wait(0.01)
    t = threading.Thread(target=loop)
    t.start()
    assert ctl.step_and_wait(10)
    t.join()
    assert ctl.state.steps == 0 and C.position(ctl.state, 10 ** 18) == START + 7 * S
    assert not Controller(C.pause(fresh(), 0)).step_and_wait(0.05)   # nobody takes it: not published


def test_keys_map_to_commands_and_a_rate_key_stops_at_the_range() -> None:
    from rt_runtime.replay.keyboard import DOWN, LEFT, RIGHT, UP, command_for

    pb = fresh()
    assert command_for(" ", pb) == C.Command("toggle")
    assert command_for("s", pb) == command_for(RIGHT, pb) == C.Command("step")
    assert command_for("n", pb) == C.Command("period")
    assert command_for("+", pb) == command_for(UP, pb) == C.Command("rate", 1.1)
    assert command_for(DOWN, pb) == C.Command("rate", 1 / 1.1)
    assert command_for("+", C.set_rate(pb, 0, 1000)) == C.Command("rate", 1000)
    assert command_for("]", pb) == C.Command("seek_by", 5 * S)
    assert command_for("[", pb) == command_for(LEFT, pb) == C.Command("seek_by", -5 * S)
    assert command_for("x", pb) is None


def test_the_keyboard_reads_a_terminal_and_gives_it_back_as_it_was() -> None:
    import os
    import pty
    import termios

    from rt_runtime.replay.keyboard import Keyboard

    master, slave = pty.openpty()
    try:
        before = termios.tcgetattr(slave)
        ctl = Controller(fresh())
        said: list[str] = []
        keys = Keyboard(ctl.command, lambda: ctl.state, said.append, fd=slave)
        assert not termios.tcgetattr(slave)[3] & termios.ICANON          # keys one by one
        os.write(master, b" s\x1b[C]")   # pause, step, step (an arrow key), seek 5 s on
        end = time.monotonic() + 10
        while ctl.state.seeks == 0 and time.monotonic() < end:
            time.sleep(0.01)
        assert ctl.state.paused and ctl.state.steps == 0 and ctl.state.seeks == 1   # the seek dropped the steps
        os.write(master, b" s")          # resume, then a step while playing: refused, one line
        end = time.monotonic() + 10
        while not said and time.monotonic() < end:
            time.sleep(0.01)
        assert said == ["play_next: playback is not paused (pause first)"] and not ctl.state.paused
        keys.close()
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


def test_a_paused_replay_feed_stands_still_steps_one_message_or_one_period_and_resumes_where_it_stood() -> None:
    from rt_runtime.replay.paced import Paced, replay_controller
    from rt_runtime.sched.clock import WallClock

    MS = 1_000_000
    clock = WallClock(rate=0.01)   # logical time barely moves with the wall: the test reads the gating alone
    ctl = replay_controller(500 * MS, 0.01, period_ns=25 * MS, paused=True)
    ran: list[int] = []
    fed: list[int] = []
    stop: list[str] = []
    paced = Paced(ctl, clock, ran.append, lambda: stop[0] if stop else None)
    items = [k * 10 * MS for k in range(50)]

    def feed() -> None:
        clock.reset_epoch()
        paced.start()
        last = 0
        for t in items:
            paced.before(t, last)
            if stop:
                return
            fed.append(t)
            last = t
    driver = threading.Thread(target=feed)
    driver.start()

    def settled(n: int) -> None:
        end = time.monotonic() + 10
        while len(fed) < n and time.monotonic() < end:
            time.sleep(0.01)
        time.sleep(0.2)   # and nothing more comes

    settled(1)
    assert fed == [0]                                  # paused at 0: the message at 0, then it stands
    ctl.command(C.Command("step"))
    settled(2)
    assert fed == [0, 10 * MS] and ran == []
    ctl.command(C.Command("period"))                   # 25 ms on: the messages in it, the runtime up to its end
    settled(4)
    assert fed == [0, 10 * MS, 20 * MS, 30 * MS] and len(ran) == 1 and 35 * MS <= ran[0] < 36 * MS
    stood = paced.blocked
    assert stood is not None and stood >= ran[0]
    time.sleep(0.3)
    ctl.command(C.Command("rate", 0.02))               # a new rate while paused, then resume
    ctl.command(C.Command("resume"))
    driver.join(10)
    assert fed == items                                # the fake runtime takes no time: the rest at once
    assert clock.rate == 0.02 and stood <= clock.now() < stood + MS   # on from where it stood, not from the wall


def test_a_seek_ends_a_replay_feed_with_the_instant_sought_and_a_run_started_there_reads_on_from_it() -> None:
    from rt_runtime.replay.paced import Paced, Seek, replay_controller
    from rt_runtime.sched.clock import WallClock

    MS = 1_000_000
    ctl = replay_controller(500 * MS, 0.01, period_ns=25 * MS, paused=True)
    paced = Paced(ctl, WallClock(rate=0.01), lambda t: None, None)
    paced.start()
    ctl.command(C.Command("seek", 300 * MS))
    with pytest.raises(Seek) as e:
        paced.before(10 * MS, 0)
    assert e.value.target_ns == 300 * MS
    # The run started there (logical 0 at 300 ms of the bag): the core stands at 300 ms, paused; a step
    # releases the message at logical 20 ms, which is the bag's 320 ms.
    again = Paced(ctl, WallClock(rate=0.01), lambda t: None, None, origin_ns=300 * MS)
    again.start()
    assert ctl.state.paused and ctl.state.anchor_bag_ns == 300 * MS
    ctl.command(C.Command("step"))
    again.before(20 * MS, 0)
    assert ctl.state.anchor_bag_ns == 320 * MS and ctl.state.steps == 0
    # A seek made while a run is being built (the run knows the count it was started for): its start keeps the
    # target, its first message raises it.
    ctl.command(C.Command("seek", 100 * MS))
    late = Paced(ctl, WallClock(rate=0.01), lambda t: None, None, origin_ns=300 * MS, seeks=e.value.seeks)
    late.start()
    assert ctl.state.anchor_bag_ns == 100 * MS
    with pytest.raises(Seek) as e2:
        late.before(0, 0)
    assert e2.value.target_ns == 100 * MS and e2.value.seeks == e.value.seeks + 1


def test_a_signal_ends_a_paused_replay_feed() -> None:
    from rt_runtime.replay.paced import Paced, replay_controller
    from rt_runtime.sched.clock import WallClock

    ctl = replay_controller(S, 1.0, period_ns=S // 10, paused=True)
    stop: list[str] = []
    paced = Paced(ctl, WallClock(), lambda t: None, lambda: stop[0] if stop else None)
    driver = threading.Thread(target=paced.before, args=(S // 2, 0))
    driver.start()
    time.sleep(0.3)
    assert driver.is_alive()                           # paused: it waits
    stop.append("SIGINT")
    driver.join(10)
    assert not driver.is_alive()
