"""The process environment DDS reads at start-up: set before rclpy is imported.

* ``ROS_AUTOMATIC_DISCOVERY_RANGE`` defaults to ``LOCALHOST``: a runtime started by hand never
  announces itself beyond the machine; a vehicle's launch sets ``SUBNET`` explicitly.
* ``RMW_IMPLEMENTATION`` defaults to Fast DDS (the one the ``ros`` extra installs).
* Fast DDS gets a profile whose shared-memory segment holds large samples whole. Its default
  segment (512 KiB) splits a 2 MB LiDAR cloud into fragments, and with the sensor QoS (best
  effort) a lost fragment loses the cloud: measured, 1 of 50 clouds of 120k points arrived. With
  a 64 MiB segment all 50 did. A profile file the user set already is left alone.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import MutableMapping

SHM_SEGMENT_BYTES = 64 << 20

# SHM first (same-host peers), UDPv4 for the rest: the same pair Fast DDS builds in, with a larger
# segment. Under LOCALHOST the RMW still clears multicast discovery and adds localhost peers.
PROFILE = f"""<?xml version="1.0" encoding="UTF-8" ?>
<!-- written by rt_runtime.ros.env: a larger shared-memory segment for large sensor samples -->
<dds xmlns="http://www.eprosima.com">
  <profiles>
    <transport_descriptors>
      <transport_descriptor>
        <transport_id>rt_runtime_shm</transport_id>
        <type>SHM</type>
        <segment_size>{SHM_SEGMENT_BYTES}</segment_size>
      </transport_descriptor>
      <transport_descriptor>
        <transport_id>rt_runtime_udp</transport_id>
        <type>UDPv4</type>
      </transport_descriptor>
    </transport_descriptors>
    <participant profile_name="rt_runtime" is_default_profile="true">
      <rtps>
        <useBuiltinTransports>false</useBuiltinTransports>
        <userTransports>
          <transport_id>rt_runtime_shm</transport_id>
          <transport_id>rt_runtime_udp</transport_id>
        </userTransports>
      </rtps>
    </participant>
  </profiles>
</dds>
"""


def profile_path() -> Path:
    """Where the Fast DDS profile is written (per user, in the temp folder)."""
    return Path(tempfile.gettempdir()) / f"rt_runtime_fastdds_{os.getuid()}.xml"


def _write_profile(path: Path) -> None:
    if path.is_file() and path.read_text() == PROFILE:
        return
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(PROFILE)
    os.replace(tmp, path)   # atomic: processes starting together never read half a file


def prepare_environment(env: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Fill in the DDS defaults (see the module doc); returns what was set. Call before importing rclpy."""
    env = os.environ if env is None else env
    done: dict[str, str] = {}
    for key, value in (("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST"), ("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")):
        if not env.get(key):
            env[key] = done[key] = value
    fast = env["RMW_IMPLEMENTATION"] in ("rmw_fastrtps_cpp", "rmw_fastrtps_dynamic_cpp")
    if fast and not env.get("FASTDDS_DEFAULT_PROFILES_FILE") and not env.get("FASTRTPS_DEFAULT_PROFILES_FILE"):
        path = profile_path()
        try:
            _write_profile(path)
        except OSError:
            return done   # an unwritable temp folder costs large-sample reliability, not the start
        env["FASTDDS_DEFAULT_PROFILES_FILE"] = done["FASTDDS_DEFAULT_PROFILES_FILE"] = str(path)
    return done
