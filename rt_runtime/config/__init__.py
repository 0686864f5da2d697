"""Configuration: YAML loading and validation with clear errors (file, then task or chain, then field)."""
from .taskset import ConfigError, load_taskset, load_yaml, parse_chains, parse_task, parse_taskset

__all__ = ["ConfigError", "load_taskset", "load_yaml", "parse_chains", "parse_task", "parse_taskset"]
