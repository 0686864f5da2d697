"""Device backends: ``cpu`` (torch or numpy) and ``cuda`` (torch.cuda, imported lazily)."""
from .base import Device, device_for
from .cpu import CpuDevice

__all__ = ["CpuDevice", "Device", "device_for"]
