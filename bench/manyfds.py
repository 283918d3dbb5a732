"""A process that holds many open files, for timing the object walk
(bench/README.md, "Locks of the objects behind open files"):

    lockscope run --duration 2 -- python3 bench/manyfds.py 4000

holds N/4 pipes and N/4 unix socket pairs (N descriptors) for 60 s."""
import os
import resource
import socket
import sys
import time

n = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
resource.setrlimit(resource.RLIMIT_NOFILE, (4 * n + 100, 4 * n + 100))
held = []
for _ in range(n // 4):
    held += os.pipe()
    held += socket.socketpair()
time.sleep(60)
