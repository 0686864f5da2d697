"""rosbag2 I/O through `rosbags` (no rclpy) and message codecs between ROS messages and arrays.

Reading: ``open_bag(path)`` -> ``BagReader`` with ``topics``, ``start_ns``, ``duration_ns``,
``messages(topics)`` (raw CDR, ordered by time, topic, per-topic sequence) and ``decode(msg)``.
Writing: ``BagWriter(path, "mcap" | "sqlite3")`` with ``add_topic`` and ``write``.
Codecs: PointCloud2, Image, CompressedImage and ground-truth objects to and from numpy arrays.
"""
from .errors import BagError, BagWarning, CodecError
from .image import array_to_compressed, array_to_image, compressed_to_array, image_to_array, to_rgb
from .objects import CLASS_NAMES, Objects, msg_to_objects, objects_to_msg
from .pointcloud import array_to_cloud, cloud_dtype, cloud_to_array, cloud_xyz
from .reader import BagMessage, BagReader, open_bag
from .types import (GROUND_TRUTH_OBJECTS, default_typestore, from_cdr, header, msg_class, new_typestore, stamp,
                    stamp_ns, to_cdr)
from .writer import BagWriter

__all__ = [
    "BagError", "BagWarning", "CodecError", "BagMessage", "BagReader", "BagWriter", "open_bag",
    "array_to_cloud", "cloud_dtype", "cloud_to_array", "cloud_xyz",
    "array_to_image", "image_to_array", "array_to_compressed", "compressed_to_array", "to_rgb",
    "CLASS_NAMES", "Objects", "msg_to_objects", "objects_to_msg", "GROUND_TRUTH_OBJECTS",
    "default_typestore", "new_typestore", "from_cdr", "to_cdr", "header", "msg_class", "stamp", "stamp_ns",
]
