"""What lockscope makes on the machine and releases: the file systems of the
points (scratch.py), a block device the user names (device.py), the ledger
of everything a run made and the reclaim of a dead run's (ownership.py),
and the watchdog that releases it all if lockscope is killed (watchdog.py)."""
