"""The live node's ROS parameters and their defaults (config/ros_params.yaml documents each)."""
from __future__ import annotations

# name -> default; [] declares an empty string array.
PARAMS: dict[str, object] = {
    "config": "",                       # stack file; "" = the reference stack
    "overrides": [],                    # dotted.key=value changes to the stack file
    "remap": [],                        # FROM=TO topic renames applied to the stack file
    "trace": "",                        # trace file written at exit ("" = none)
    "workers": 0,                       # 0 = the stack file's
    "realtime": False,                  # pin workers, SCHED_FIFO where permitted
    "speculate": False,                 # turn on the stack file's speculate: keys (docs/SAFETY.md)
    "qos_depth": 5,                     # sensor subscriptions: keep last N
    "qos_reliability": "best_effort",   # or "reliable"
    "stale_after": "500ms",             # an input silent this long (and 3 of its periods) is stale
    "degrade_on_stale": ["/sensing/lidar/points", "/localization/odometry"],
    "watch_channels": ["planning/status"],   # channel values reported in diagnostics
    "foxglove": "",                     # HOST:PORT of the live view's Foxglove websocket ("" = none)
    "foxglove_hz": 10.0,                # the live view's rate (logical time): outputs at most, jobs batched, per s
    "foxglove_mcap": "",                # the live view's channels into this new MCAP file ("" = none)
}
