"""`lockscope doctor`: which probes, counters and file systems work on this
machine and why not, and what killed runs left behind."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from lockscope import paths
from lockscope.measure import hwcounters
from lockscope.machine import mounts, ownership, scratch
from lockscope.errors import LockscopeError
from lockscope.model.jsondata import parse_addr
from lockscope.measure.probe import BTF, ProbeSession

TRACEPOINTS = ("lock:contention_begin", "lock:contention_end", "sched:sched_switch",
               "sched:sched_process_fork", "sched:sched_process_exit")


def _kallsyms_has(names: set[str]) -> dict[str, bool]:
    found = dict.fromkeys(names, False)
    try:
        with open("/proc/kallsyms") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 3 and parts[2] in found:
                    found[parts[2]] = True
    except OSError:
        pass
    return found


def _check(name: str, ok: bool | None, detail: str, needed: bool = False) -> dict:
    return {"name": name, "ok": ok, "detail": detail, "needed": needed}


def _probe_check() -> dict:
    try:
        with ProbeSession() as p:
            ready = p.ready
        return _check("BPF probes: tp_btf contention + sched_switch, task/task_file iterators", True,
                      f"loaded and attached ({ready.get('ncpus')} CPUs, stack depth {ready.get('stack_depth')})",
                      True)
    except LockscopeError as e:
        return _check("BPF probes: tp_btf contention + sched_switch, task/task_file iterators", False, str(e), True)


def _own_bpf_programs() -> list[dict]:
    """lockscope's BPF programs loaded now: name, id, and the pids holding
    them (where bpftool says)."""
    if not shutil.which("bpftool"):
        return []
    p = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True)
    if p.returncode != 0:
        return []
    try:
        progs = json.loads(p.stdout)
    except json.JSONDecodeError:
        return []
    return [{"name": f"{x.get('name')} (id {x.get('id')})", "pids": [int(h["pid"]) for h in x.get("pids", [])]}
            for x in progs if str(x.get("name", "")).startswith("lksc_")]


def _own_processes() -> list[tuple[int, str]]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                comm = (d / "comm").read_text().strip()
            except OSError:
                continue
            if comm in ("lockscope-probe", "lockscope-workl"):
                out.append((int(d.name), comm))
    return out


def ownership_survey() -> dict:
    """What live runs hold (never touched), what dead runs left (released by
    --clean), and what looks like lockscope's but no run recorded (never
    touched: an older lockscope's, or not lockscope's at all)."""
    found = ownership.survey()
    live = ownership.live_pids()
    recorded = {i["path"] for state in ownership.ledgers() for i in state.items if i["kind"] == "mount"}
    unrecorded = [f"mount {target} ({fstype})" for source, target, fstype in mounts.mounts()
                  if source == scratch.MOUNT_SOURCE and target not in recorded]
    unrecorded += [f"{comm} (pid {pid})" for pid, comm in _own_processes() if pid not in live]
    progs = _own_bpf_programs()
    for prog in progs:
        held_live = any(pid in live for pid in prog["pids"]) or (not prog["pids"] and found["in_use"])
        if not held_live:
            unrecorded.append(f"BPF program {prog['name']}" +
                              (f" held by pid {', '.join(map(str, prog['pids']))}" if prog["pids"] else ""))
    return {**found, "unrecorded": unrecorded}


def diagnose(scratch_root: Path = scratch.DEFAULT_SCRATCH) -> dict:
    checks = []
    root = os.geteuid() == 0
    checks.append(_check("running as root", root, "yes" if root else "no: run with sudo", True))
    btf = BTF.exists()
    checks.append(_check("kernel BTF", btf, str(BTF) if btf else f"{BTF} missing (CONFIG_DEBUG_INFO_BTF)", True))
    built = {}
    for name in ("lockscope-probe", "lockscope-workload"):
        try:
            checks.append(_check(f"{name} binary", True, str(paths.binary(name)), True))
            built[name] = True
        except LockscopeError as e:
            checks.append(_check(f"{name} binary", False, str(e), True))
            built[name] = False
    if root and btf and built["lockscope-probe"]:
        checks.append(_probe_check())
    else:
        checks.append(_check("BPF probes", False, "not tried: needs root, BTF and the probe binary", True))
    syms = _kallsyms_has({"register_kprobe", "bpf_trampoline_link_prog", "rename_lock"})
    kallsyms_visible = True
    try:
        with open("/proc/kallsyms") as f:
            kallsyms_visible = parse_addr(f.readline().split()[0]) != 0
    except (OSError, ValueError, IndexError):
        kallsyms_visible = False
    checks.append(_check("kernel stack symbols (/proc/kallsyms)", kallsyms_visible,
                         "addresses visible" if kallsyms_visible else "addresses hidden (kptr_restrict)", True))
    checks.append(_check("kprobes", syms["register_kprobe"],
                         "present (lockscope does not need them)" if syms["register_kprobe"]
                         else "absent (CONFIG_KPROBES off); lockscope does not need them"))
    checks.append(_check("fentry/fexit", None, "not used: lockscope attaches to tracepoints (tp_btf)"))
    checks.append(_check("global data symbols (KALLSYMS_ALL)", syms["rename_lock"],
                         "present" if syms["rename_lock"] else
                         "absent: a lock in the kernel image's static data is one global lock, named by the rules "
                         "of the knowledge base (inferred tier); --vmlinux with a System.map or vmlinux names "
                         "its variable (verified)"))
    hw_ok, hw_why = hwcounters.availability()
    checks.append(_check("hardware counters (cycles, instructions)", hw_ok,
                         hw_why + ("" if hw_ok else "; CPI is reported as unavailable")))
    fss = []
    for name, setup in scratch.FS_SETUPS.items():
        k_ok, k_why = scratch.kernel_support(setup.fstype)
        t_ok, t_why = scratch.tool_support(name)
        tool = setup.mkfs[0] if setup.mkfs else "tools"
        fss.append({"name": name, "ok": k_ok and t_ok, "kernel": k_ok, "tool": t_ok,
                    "detail": f"kernel: {'yes, ' + k_why if k_ok else k_why}; "
                              f"{tool}: {t_why if setup.mkfs else 'none needed'}"})
    try:
        scratch.check_root(scratch_root)
        checks.append(_check("scratch root", True, f"{scratch_root}: usable"))
    except LockscopeError as e:
        checks.append(_check("scratch root", False, e.message, True))
    owned = ownership_survey()
    essential = all(c["ok"] for c in checks if c["needed"])
    return {"ready": essential, "checks": checks, "fs": fss, "leftovers": owned["leftovers"],
            "in_use": owned["in_use"], "unrecorded": owned["unrecorded"], "scratch": str(scratch_root),
            "state": str(ownership.STATE_DIR)}


def render(d: dict) -> str:
    mark = {True: "ok  ", False: "FAIL", None: "--  "}
    lines = ["lockscope doctor"]
    for c in d["checks"]:
        m = mark[c["ok"]] if (c["needed"] or c["ok"] is not False) else "no  "
        lines.append(f"  [{m}] {c['name']}: {c['detail']}")
    lines.append("  file systems:")
    for f in d["fs"]:
        lines.append(f"  [{'ok  ' if f['ok'] else 'no  '}] {f['name']}: {f['detail']}")
    for run in d["in_use"]:
        lines.append(f"  in use by run {run['pid']} ({run['command']}): not touched")
        lines += [f"    {item}" for item in run["items"]]
    left = {k: v for k, v in d["leftovers"].items() if v}
    if left:
        lines.append(f"  leftovers of killed runs (recorded in {d['state']}):")
        for k, v in left.items():
            for item in v:
                lines.append(f"    {k.replace('_', ' ')}: {item}")
        lines.append("  release them with: lockscope doctor --clean")
    else:
        lines.append("  leftovers of killed runs: none")
    if d["unrecorded"]:
        lines.append("  lockscope-like, but recorded by no run (never touched; release them yourself if yours):")
        lines += [f"    {item}" for item in d["unrecorded"]]
    lines.append("ready: lockscope can run here" if d["ready"] else "not ready: fix the FAIL lines above")
    return "\n".join(lines)
