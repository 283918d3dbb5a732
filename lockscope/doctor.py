"""`lockscope doctor`: which probes, counters and file systems work on this
machine and why not, and what killed runs left behind."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from lockscope import hwcounters, paths, scratch
from lockscope.errors import LockscopeError
from lockscope.jsondata import parse_addr
from lockscope.probe import BTF, ProbeSession

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


def _own_bpf_programs() -> list[str]:
    if not shutil.which("bpftool"):
        return []
    p = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True)
    if p.returncode != 0:
        return []
    try:
        progs = json.loads(p.stdout)
    except json.JSONDecodeError:
        return []
    return [f"{x.get('name')} (id {x.get('id')})" for x in progs if str(x.get("name", "")).startswith("lksc_")]


def _own_processes() -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                comm = (d / "comm").read_text().strip()
            except OSError:
                continue
            if comm in ("lockscope-probe", "lockscope-workl"):
                out.append(f"{comm} (pid {d.name})")
    return out


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
    left = scratch.leftovers(scratch_root)
    left["bpf_programs"] = _own_bpf_programs()
    left["processes"] = _own_processes()
    essential = all(c["ok"] for c in checks if c["needed"])
    return {"ready": essential, "checks": checks, "fs": fss, "leftovers": left,
            "scratch": str(scratch_root)}


def render(d: dict) -> str:
    mark = {True: "ok  ", False: "FAIL", None: "--  "}
    lines = ["lockscope doctor"]
    for c in d["checks"]:
        m = mark[c["ok"]] if (c["needed"] or c["ok"] is not False) else "no  "
        lines.append(f"  [{m}] {c['name']}: {c['detail']}")
    lines.append("  file systems:")
    for f in d["fs"]:
        lines.append(f"  [{'ok  ' if f['ok'] else 'no  '}] {f['name']}: {f['detail']}")
    left = {k: v for k, v in d["leftovers"].items() if v}
    if left:
        lines.append(f"  leftovers of earlier runs under {d['scratch']}:")
        for k, v in left.items():
            for item in v:
                lines.append(f"    {k.replace('_', ' ')}: {item}")
        lines.append("  release them with: lockscope doctor --clean")
    else:
        lines.append("  leftovers: none")
    lines.append("ready: lockscope can run here" if d["ready"] else "not ready: fix the FAIL lines above")
    return "\n".join(lines)
