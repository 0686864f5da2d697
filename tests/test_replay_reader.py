"""The replay's reader process (``replay.feed_process``): the items and the digest of the reader
thread, a corrupt bag's error in the same one line, no torch in the child, and no child process left
after a replay returns, raises or is interrupted."""
from __future__ import annotations

import itertools
import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from replay_fixtures import short_bag  # noqa: F401 - a fixture

from rt_runtime.bag import BagError, BagWriter, open_bag
from rt_runtime.config.stack import load_stack
from rt_runtime.replay import ReplayError, replay
from rt_runtime.replay.feed import decoded_feed, prefetched
from rt_runtime.replay.feed_process import PROCESS_MIN_BYTES, ProcessFeed, reader_kind

ROOT = Path(__file__).resolve().parents[1]
S = 1_000_000_000


@pytest.fixture(scope="module")
def cfg() -> Any:
    return load_stack(ROOT / "config" / "stack.yaml")


def _feed_children() -> list[int]:
    """This process's reader children, running or not yet reaped (a zombie has no command line)."""
    me, out = os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmd = (stat.parent / "cmdline").read_bytes()
        except OSError:   # it ended while we looked
            continue
        if int(fields[1]) == me and (b"feed_process" in cmd or fields[0] == "Z"):
            out.append(int(stat.parent.name))
    return out


def _key(item: Any) -> tuple[Any, ...]:
    """Everything an item says, its arrays as (dtype, shape, bytes)."""
    value = None if item.value is None else {k: (a.dtype.str, a.shape, a.tobytes()) for k, a in item.value.items()}
    return (item.t_ns, item.log_ns, item.topic, item.route, item.error, item.kind, item.notes, item.stamp_ns, value)


def _thread_feed(bag: Path, routes: dict[str, Any]) -> list[tuple[Any, ...]]:
    with open_bag(bag) as r:
        return [_key(i) for i in prefetched(decoded_feed(r, routes, r.duration_ns))]


def test_the_process_feed_gives_the_thread_feeds_items_and_ends_its_child(short_bag, cfg):  # noqa: F811
    routes = {r.topic: r for r in cfg.ingress}
    expected = _thread_feed(short_bag, routes)
    with open_bag(short_bag) as r:
        duration = r.duration_ns
    with ProcessFeed(short_bag, routes, duration) as feed:
        got = [_key(i) for i in feed]
    assert len(got) > 100 and got == expected
    assert not _feed_children()
    with ProcessFeed(short_bag, routes, duration) as feed:   # closed half way: the child is ended, not left
        first = list(itertools.islice(iter(feed), 5))
        assert _feed_children()
    assert [_key(i) for i in first] == expected[:5]
    assert not _feed_children()


def test_a_replay_through_the_process_reader_has_the_thread_readers_outputs(short_bag, cfg):  # noqa: F811
    a = replay(short_bag, cfg, reader="thread", until_s=1.0, hardware=False)
    b = replay(short_bag, cfg, reader="process", until_s=1.0, hardware=False)
    assert b.output_digest == a.output_digest and b.inputs == a.inputs and b.outputs == a.outputs
    assert b.bad_messages == a.bad_messages
    assert a.extra["reading"]["reader"] == "thread" and b.extra["reading"]["reader"] == "process"
    assert b.extra["reading"]["cpu_s"] > 0   # the child said what it used, at its end
    assert not _feed_children()


def _corrupt(src: Path, dst: Path) -> None:
    """1.2 s of ``src`` whose fourth chunk's first record claims more bytes than the chunk has (no CRC
    to catch it): the bag opens, and reading fails half way."""
    with open_bag(src) as r, BagWriter(dst, "mcap") as w:
        for topic, msgtype in r.topics.items():
            w.add_topic(topic, msgtype)
        for m in r.messages():
            if m.t_ns - r.start_ns > 1.2 * S:
                break
            w.write(m.topic, m.t_ns, m.raw_cdr)
    mcap = next(dst.glob("*.mcap"))
    data = bytearray(mcap.read_bytes())
    pos, chunks = 8, []
    while pos + 9 <= len(data) and data[pos] != 0x02:   # up to the footer
        if data[pos] == 0x06:   # a chunk: its records start after start, end, size, crc, compression, length
            clen = struct.unpack_from("<I", data, pos + 9 + 28)[0]
            chunks.append(pos + 9 + 40 + clen)
        pos += 9 + struct.unpack_from("<Q", data, pos + 1)[0]
    struct.pack_into("<Q", data, chunks[3] + 1, 1 << 40)
    mcap.write_bytes(bytes(data))


def test_a_corrupt_bag_fails_in_the_same_line_through_either_reader(short_bag, cfg, tmp_path):  # noqa: F811
    bag = tmp_path / "corrupt"
    _corrupt(short_bag, bag)
    with pytest.raises(BagError) as thread_error:
        _thread_feed(bag, {r.topic: r for r in cfg.ingress})
    with pytest.raises(BagError) as process_error:
        replay(bag, cfg, reader="process", hardware=False)
    said = str(process_error.value)
    assert said == str(thread_error.value) and "\n" not in said and "corrupt data" in said, said
    assert not _feed_children()


def test_an_interrupted_replay_leaves_no_reader_process(short_bag, cfg):  # noqa: F811
    calls = itertools.count()
    running: list[list[int]] = []

    def stop() -> str | None:
        n = next(calls)
        if n == 10:
            running.append(_feed_children())
        return "SIGINT" if n >= 40 else None

    result = replay(short_bag, cfg, reader="process", stop=stop, hardware=False)
    assert result.extra["interrupted"] == "SIGINT" and running and running[0]   # the child was reading
    assert not _feed_children()


def test_the_reader_process_does_not_import_torch(short_bag, cfg):  # noqa: F811
    codecs = json.dumps({r.topic: r.codec for r in cfg.ingress})
    code = ("import os, sys; from rt_runtime.replay.feed_process import child_main; "
            "child_main([sys.argv[1], sys.argv[2], str(10**9), str(os.open(os.devnull, os.O_WRONLY)), '4', '0']); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')[:3])")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", code, str(short_bag), codecs], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", (proc.stdout, proc.stderr)


def test_auto_reads_big_bags_in_a_process_and_a_bad_choice_is_refused(short_bag, cfg):  # noqa: F811
    cores = os.cpu_count() or 1
    assert reader_kind("auto", PROCESS_MIN_BYTES, cores - 1) == ("process" if cores > 1 else "thread")
    assert reader_kind("auto", PROCESS_MIN_BYTES - 1, 0) == "thread"   # small: the start-up would cost more
    assert reader_kind("auto", 1 << 40, cores) == "thread"   # no core left for the child
    assert reader_kind("thread", 1 << 40, 0) == "thread" and reader_kind("process", 0, cores) == "process"
    with pytest.raises(ReplayError, match="reader: expected one of auto, thread, process, found 'fork'"):
        replay(short_bag, cfg, reader="fork")
