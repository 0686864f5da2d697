"""Ground-truth objects (`rt_runtime_msgs/msg/GroundTruthObjects`) <-> arrays."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import CodecError
from .types import GROUND_TRUTH_OBJECT, GROUND_TRUTH_OBJECTS, header, msg_class, point, stamp_ns, vector3

CLASS_NAMES: tuple[str, ...] = ("unknown", "car", "truck", "bicycle", "pedestrian")  # = label constants


@dataclass(frozen=True)
class Objects:
    """A set of 3D boxes: ids (N,), classes (N,) uint8, boxes (N, 7) x,y,z,l,w,h,yaw, velocities (N, 3)."""

    t_ns: int
    frame_id: str
    ids: np.ndarray
    classes: np.ndarray
    boxes: np.ndarray
    velocities: np.ndarray

    def __len__(self) -> int:
        return int(self.ids.shape[0])

    def class_names(self) -> list[str]:
        """Class names of the objects, in order."""
        return [CLASS_NAMES[c] if c < len(CLASS_NAMES) else "unknown" for c in self.classes]


def objects_to_msg(obj: Objects) -> Any:
    """Objects -> GroundTruthObjects message."""
    n = len(obj)
    if obj.boxes.shape != (n, 7) or obj.velocities.shape != (n, 3) or obj.classes.shape != (n,):
        raise CodecError(f"GroundTruthObjects (frame {obj.frame_id!r}): expected ids (N,), classes (N,), "
                         f"boxes (N, 7), velocities (N, 3); found {obj.ids.shape}, {obj.classes.shape}, "
                         f"{obj.boxes.shape}, {obj.velocities.shape}")
    cls = msg_class(GROUND_TRUTH_OBJECT)
    items = [cls(id=int(obj.ids[i]), label=int(obj.classes[i]),
                 position=point(*obj.boxes[i, :3]), dimensions=vector3(*obj.boxes[i, 3:6]),
                 yaw=float(obj.boxes[i, 6]), velocity=vector3(*obj.velocities[i]))
             for i in range(n)]
    return msg_class(GROUND_TRUTH_OBJECTS)(header=header(obj.t_ns, obj.frame_id), objects=items)


def msg_to_objects(msg: Any) -> Objects:
    """GroundTruthObjects message (from any type store that has the type) -> Objects."""
    objs = msg.objects
    n = len(objs)
    boxes = np.array([(o.position.x, o.position.y, o.position.z, o.dimensions.x, o.dimensions.y,
                       o.dimensions.z, o.yaw) for o in objs], np.float64).reshape(n, 7)
    vel = np.array([(o.velocity.x, o.velocity.y, o.velocity.z) for o in objs], np.float64).reshape(n, 3)
    return Objects(stamp_ns(msg.header.stamp), msg.header.frame_id,
                   np.array([o.id for o in objs], np.uint32), np.array([o.label for o in objs], np.uint8), boxes, vel)
