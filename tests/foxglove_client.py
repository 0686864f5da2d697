"""A Foxglove protocol client (``websockets``, subprotocol ``foxglove.sdk.v1``) and an MCAP reader (``mcap``) for
the live view's tests: every channel subscribed as advertised, each message decoded by its own schema (JSON,
or protobuf from the FileDescriptorSet the channel carries)."""
from __future__ import annotations

import base64
import json
import struct
from pathlib import Path
from typing import Any

SUBPROTOCOL = "foxglove.sdk.v1"
MESSAGE_DATA = 0x01   # binary opcode: subscription id (u32), log time (u64), payload


def proto_class(name: str, descriptor_set: bytes) -> Any:
    """The protobuf message class ``name`` (``foxglove.SceneUpdate``) from a serialized FileDescriptorSet."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    for f in descriptor_pb2.FileDescriptorSet.FromString(descriptor_set).file:
        pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


def decoder(encoding: str, schema_name: str, schema: bytes) -> Any:
    """bytes -> the decoded message (a dict for JSON, a protobuf message for protobuf)."""
    if encoding == "json":
        return lambda data: json.loads(data)
    cls = proto_class(schema_name, schema)
    return cls.FromString


async def watch(url: str, got: dict[str, list[Any]] | None = None
                ) -> tuple[dict[str, dict], dict[str, list[Any]], dict[str, list[int]]]:
    """Subscribe to every channel as it is advertised; per topic the channel, its messages decoded and their log
    times, until the server stops (``got``: filled as they come, for a caller on another thread)."""
    import websockets

    channels: dict[int, dict] = {}
    subs: dict[int, tuple[str, Any]] = {}
    got = {} if got is None else got
    times: dict[str, list[int]] = {}
    async with websockets.connect(url, subprotocols=[SUBPROTOCOL], max_size=None) as ws:
        assert ws.subprotocol == SUBPROTOCOL
        try:
            async for frame in ws:
                if isinstance(frame, str):
                    op = json.loads(frame)
                    if op["op"] == "advertise":
                        new = []
                        for ch in op["channels"]:
                            channels[ch["id"]] = ch
                            schema = ch["schema"].encode() if ch["encoding"] == "json" else \
                                base64.b64decode(ch["schema"])
                            subs[len(subs) + 1] = (ch["topic"], decoder(ch["encoding"], ch["schemaName"], schema))
                            new.append({"id": len(subs), "channelId": ch["id"]})
                        await ws.send(json.dumps({"op": "subscribe", "subscriptions": new}))
                elif frame[0] == MESSAGE_DATA:
                    sub, log_time = struct.unpack_from("<IQ", frame, 1)
                    topic, decode = subs[sub]
                    got.setdefault(topic, []).append(decode(bytes(frame[13:])))
                    times.setdefault(topic, []).append(log_time)
        except websockets.ConnectionClosed:
            pass
    return {ch["topic"]: ch for ch in channels.values()}, got, times


def read_mcap(path: Path) -> tuple[dict[str, tuple[str, str]], dict[str, list[Any]], dict[str, dict[str, str]]]:
    """An MCAP file's channels (topic -> (schema name, encoding)), messages decoded per topic, metadata records."""
    from mcap.reader import make_reader

    with open(path, "rb") as f:
        reader = make_reader(f)
        summary = reader.get_summary()
        channels = {c.topic: (summary.schemas[c.schema_id].name, c.message_encoding) for c in summary.channels.values()}
        decoders = {c.topic: decoder(c.message_encoding, summary.schemas[c.schema_id].name,
                                     summary.schemas[c.schema_id].data) for c in summary.channels.values()}
        got: dict[str, list[Any]] = {}
        for _, ch, msg in reader.iter_messages(log_time_order=False):
            got.setdefault(ch.topic, []).append(decoders[ch.topic](msg.data))
        meta = {m.name: dict(m.metadata) for m in reader.iter_metadata()}
    return channels, got, meta


def jobs_of(batches: list[dict]) -> list[dict]:
    """The jobs of a task's ``/rt/tasks/<task>/jobs`` messages (a batch per interval), in order."""
    return [j for b in batches for j in b["jobs"]]


def latencies_of(batches: list[dict]) -> list[dict]:
    """The outputs of a chain's ``/rt/chains/<chain>`` messages (a batch per interval), in order."""
    return [x for b in batches for x in b["latencies"]]


def conforms(msg: Any, schema: dict) -> bool:
    """``msg`` has the required keys and no others of ``schema``'s, nested objects and arrays of them too."""
    if schema.get("type") == "array":
        return isinstance(msg, list) and all(conforms(m, schema["items"]) for m in msg)
    if schema.get("type") != "object":
        return True
    props = schema["properties"]
    return set(schema.get("required", ())) <= set(msg) <= set(props) and \
        all(conforms(v, props[k]) for k, v in msg.items())
