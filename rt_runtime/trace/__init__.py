"""Tracing: a preallocated event ring, the compact trace file, and the Perfetto export."""
from .file import TraceFileError, TraceWriter, load_trace, save_trace
from .perfetto import to_chrome_events, write_perfetto
from .ring import TraceColumns, TraceRing

__all__ = ["TraceColumns", "TraceFileError", "TraceRing", "TraceWriter", "load_trace", "save_trace",
           "to_chrome_events", "write_perfetto"]
