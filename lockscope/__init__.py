"""lockscope: lock-contention profiler and scalability analyzer for Linux."""

__version__ = "0.1.0"
