#!/bin/sh
# Independent cross-check of bench/stressng_cases.py: the kernel's own lock contention
# tracepoints, counted and timed per 5-frame kernel stack, for stress-ng's tasks only, while
# one stress-ng stressor runs on a fresh tmpfs (no lockscope involved).
#   sh bench/stressng_bpftrace.sh "--flock 2" [seconds]
# Prints the top stacks by total wait (ns) and by count.
set -eu
opts=$1; secs=${2:-4}
dir=$(mktemp -d /tmp/lksc-stressng-bt.XXXXXX)
mount -t tmpfs -o size=512m tmpfs "$dir"
trap 'umount "$dir"; rmdir "$dir"' EXIT
# shellcheck disable=SC2086
stress-ng $opts --temp-path "$dir" --timeout $((secs + 2)) >/dev/null 2>&1 &
sng=$!
sleep 1
bpftrace -e '
tracepoint:lock:contention_begin /strncmp(comm, "stress-ng", 9) == 0/ {
  @ts[tid] = nsecs; @st[tid] = kstack(5); @count[kstack(5)] = count(); }
tracepoint:lock:contention_end /@ts[tid]/ {
  @wait_ns[@st[tid]] = sum(nsecs - @ts[tid]); delete(@ts[tid]); delete(@st[tid]); }
interval:s:'"$secs"' { exit(); }
END { clear(@ts); clear(@st); print(@wait_ns, 4); print(@count, 4); clear(@wait_ns); clear(@count); }'
wait $sng || true
