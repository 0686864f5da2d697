"""Adapters between ROS messages and the runtime's tensors: ingress decoders, egress encoders.

The same codecs serve the bag replay (``rosbags`` message objects) and the live ROS node (rclpy
message objects): both expose the same field names, and the codecs only read and write fields.
"""
from .egress import EGRESS_CODECS, EgressCodec
from .ingress import INGRESS_CODECS, IngressCodec, IngressError, NonFiniteError

__all__ = ["EGRESS_CODECS", "INGRESS_CODECS", "EgressCodec", "IngressCodec", "IngressError", "NonFiniteError"]
