"""The `lockscope` command: main(), signal handling, and one cmd_* function
per subcommand (run, sweep, analyze, report, export, compare, doctor, list).
The command line's grammar is in cliargs, the checks of its values in
validate, and what run and sweep measure in settings."""
from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path

from lockscope import atomicio, record, scratch, validate
from lockscope.cliargs import build_parser, split_command
from lockscope.errors import EXIT_INTERRUPTED, EXIT_USAGE, Interrupted, LockscopeError


# ---- commands -------------------------------------------------------------

def cmd_run(args: argparse.Namespace, command: list[str] | None) -> int:
    from lockscope.runner import run_point
    from lockscope.settings import default_out, point_spec

    spec = point_spec(args, command)
    validate.require_run_environment(spec.probe)
    out = args.out or default_out(spec.id)
    rec = run_point(spec)
    path = out / "runs" / f"{spec.id}.json"
    record.save(rec, path)
    if args.json:
        json.dump(record.to_dict(rec), sys.stdout, indent=1)
        print()
    else:
        print(summarize(rec))
        print(f"record: {path}\nnext:   lockscope report {out}")
    return 0


def summarize(rec) -> str:
    on = f" on {rec.fs}" if rec.fs != "none" else ""
    tput = f"{rec.ops_per_sec:,.0f} {rec.throughput_unit}" if rec.ops_per_sec is not None else "throughput unknown"
    lines = [f"{rec.workload}{on}, {rec.workers} worker{'s' if rec.workers != 1 else ''}, "
             f"{rec.duration_s:.2f} s: {tput}" + (" (oversubscribed)" if rec.oversubscribed else "")]
    if len(rec.per_worker) > 16:
        ops = sorted(w.ops for w in rec.per_worker)
        lines.append(f"per worker: min {ops[0]:,}, median {ops[len(ops) // 2]:,}, max {ops[-1]:,}" +
                     (f"; {sum(w.ran_out for w in rec.per_worker)} ran out" if any(w.ran_out for w in rec.per_worker)
                      else ""))
    elif rec.per_worker:
        lines.append("per worker: " + ", ".join(f"{w.ops:,}" + (" (ran out)" if w.ran_out else "")
                                                for w in rec.per_worker))
    if rec.params:
        lines.append("parameters: " + ", ".join(f"{k}={v}" for k, v in rec.params.items()))
    if rec.latency:
        lines.append("latency per operation (ops, p50 / p99 / max):")
        for op, lat in rec.latency.items():
            sampled = (f"  (timed: 1 op in {lat.count / lat.timed:.0f})"
                       if lat.timed and lat.count > 1.5 * lat.timed else "")
            lines.append(f"  {op:<8} {lat.count:>12,}  {_ns(lat.p50_ns)} / {_ns(lat.p99_ns)} / {_ns(lat.max_ns)}"
                         + sampled)
    elif len(rec.op_counts) > 1:
        lines.append("ops per operation: " + ", ".join(f"{k} {v:,}" for k, v in rec.op_counts.items()))
    if rec.timeseries:
        lines.append(f"time series: {len(rec.timeseries)} intervals of {rec.interval_s:g} s, ops/s " +
                     " ".join(f"{i.ops_per_sec:,.0f}" for i in rec.timeseries[:12]) +
                     (" ..." if len(rec.timeseries) > 12 else ""))
    c = rec.cpu
    lines.append(f"CPU {','.join(map(str, c.cpus))}: user {c.user:.0%}  sys {c.sys:.0%}  idle {c.idle:.0%}  "
                 f"iowait {c.iowait:.0%}  irq {c.irq:.0%}")
    if not rec.probe.attached:
        lines.append(f"locks: not measured ({rec.probe.reason})")
    elif not rec.locks:
        lines.append("locks: no contention recorded")
    else:
        lines.append("top locks (share of worker time waiting):")
        for lk in rec.locks[:5]:
            st = lk.stacks[0] if lk.stacks else None
            where = f"  {' <- '.join(st.frames[:3])}" + (f" [{st.syscall}]" if st and st.syscall else "") if st else ""
            inst = f"{lk.instances} instance{'s' if lk.instances != 1 else ''}"
            lines.append(f"  {lk.wait_share:7.2%}  {lk.name}  ({lk.kind}, {lk.tier}, {inst}){where}")
    for w in rec.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def _ns(ns: int) -> str:
    """A latency for people: 850 ns, 12.3 us, 4.1 ms, 1.20 s."""
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            v = ns / scale
            return f"{v:.3g} {unit}" if v < 100 else f"{v:.0f} {unit}"
    return f"{ns} ns"


def cmd_sweep(args: argparse.Namespace, command: list[str] | None) -> int:
    from lockscope.settings import default_out, sweep_spec
    from lockscope.sweep import run_sweep

    spec = sweep_spec(args, command)
    validate.require_run_environment(spec.probe)
    out = args.out or default_out("sweep")
    outcome = run_sweep(spec, out)
    print(f"{len(outcome.done)} points measured, {len(outcome.skipped)} already there, "
          f"{len(outcome.failed)} failed; results in {out}\nnext: lockscope report {out}")
    for pid, msg in outcome.failed.items():
        print(f"failed: {pid}: {msg}", file=sys.stderr)
    for fs, why in spec.unavailable_fs.items():
        print(f"skipped: file system {fs}: {why}", file=sys.stderr)
    return 1 if outcome.failed else 0


def cmd_analyze(args) -> int:
    from lockscope.analyzer.analyze import analyze, load_records, to_json

    exps = analyze(load_records(args.dir))
    if args.json:
        json.dump(to_json(exps), sys.stdout, indent=1)
        print()
        return 0
    for e in exps:
        print(e.diagnosis)
        for p in e.points:
            top = p.waits[0] if p.waits else None
            print(f"  {p.workers:>4} workers  {p.ops_per_sec:>14,.0f} {e.unit}  speedup {p.speedup:5.2f}  "
                  f"efficiency {p.efficiency:4.0%}" +
                  (f"  named {p.named_share:4.0%}" if p.named_share is not None else "") +
                  (f"  top wait: {top['name']} {top['wait_share']:.1%}" if top else ""))
        for line in analysis_lines(e.extra, e.unit):
            print(line)
        print()
    return 0


def analysis_lines(x: dict, unit: str) -> list[str]:
    """The USL fit, attribution, what-if, time view and CPI of an experiment
    (Experiment.extra), as text."""
    out = []
    u = x.get("usl") or {}
    if "unavailable" in u:
        out.append(f"  USL fit: unavailable: {u['unavailable']}")
    elif u:
        peak = (f"peak {u['peak_throughput']:,.0f} {unit} at {u['peak_workers']:.1f} workers"
                + (" (extrapolated beyond the measured points)" if u["peak_extrapolated"] else "")
                if u.get("peak_workers") is not None else "no peak (coherency beta = 0)")
        out.append(f"  USL fit ({u['points_used']} points): alpha {u['alpha']:.4f}, beta {u['beta']:.5f}, "
                   f"lambda {u['lambda']:,.0f} {unit}, R2 {u['r2']:.3f}; {peak}")
    for a in x.get("attribution", []):
        if a["lost_capacity"] <= 0:
            continue             # nothing lost (the first point, or a perfectly scaling one)
        items = [i for i in a["items"] if i["worker_equivalents"] >= 0.005][:4]
        parts = [f"{i['name']} {i['worker_equivalents']:.2f}" +
                 (f" ({i['share_of_loss']:.0%})" if a["lost_capacity"] > 0 else "") for i in items]
        parts.append(f"unexplained {a['unexplained']:.2f}")
        out.append(f"  lost capacity at {a['workers']}: {a['lost_capacity']:.2f} of {a['ideal']:g} workers = "
                   + ", ".join(parts) + (" (the waits exceed the loss)" if a["waits_exceed_loss"] else ""))
    w = x.get("whatif") or {}
    if "unavailable" in w:
        out.append(f"  what-if: unavailable: {w['unavailable']}")
    elif w:
        out.append(f"  what-if ({w['label']}): " + ", ".join(
            f"{c['workers']}: {c['ops_per_sec']:,.0f}" + (" (ideal)" if c.get("capped") else "") for c in w["curve"])
            + f" {unit}")
    t = x.get("timeview") or {}
    if "unavailable" in t:
        out.append(f"  time view: unavailable: {t['unavailable']}")
    elif t:
        parts = [f"{s['name']} {min(s['wait_share']):.0%}..{max(s['wait_share']):.0%}"
                 for s in t["series"] if s["wait_share"] and max(s["wait_share"]) >= 0.01][:3]
        out.append(f"  time view at {t['workers']} workers ({len(t['t_s'])} intervals of {t['interval_s']:g} s), "
                   "share of worker time per interval: " + ("; ".join(parts) or "no wait above 1%"))
    cpi = x.get("cpi") or []
    reasons = {c.get("unavailable") for c in cpi if "unavailable" in c}
    if cpi and len(reasons) == 1 and all("unavailable" in c for c in cpi):
        out.append(f"  CPI: unavailable: {reasons.pop()}")
    elif cpi:
        out.append("  CPI: " + ", ".join(f"{c['workers']}: {c['value']:.2f}" if "value" in c
                                         else f"{c['workers']}: unavailable ({c['unavailable']})" for c in cpi))
    return out


def cmd_report(args) -> int:
    from lockscope.reports.html import write_report

    path = write_report(args.dir, args.out)
    print(f"report: {path}")
    return 0


def cmd_export(args) -> int:
    from lockscope.reports.exports import write_exports

    paths = write_exports(args.dir, args.out)
    out = args.out or Path(args.dir) / "exports"
    figs = sum(1 for p in paths if p.parent.name == "figures")
    runs = sum(1 for p in paths if p.parent.name == "runs")
    print(f"exports: {out}\n  {figs} figures (PDF and SVG) in figures/, bottlenecks.csv, bottlenecks.tex, "
          f"analysis.json, {runs} run records in runs/")
    return 0


def cmd_compare(args) -> int:
    from lockscope.reports.compare import compare, render_html, render_text

    doc = compare(args.a, args.b, args.fs_a, args.fs_b, args.workload)
    if args.html:
        html = render_html(doc)
        atomicio.write_text(args.html, html)
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
    else:
        sys.stdout.write(render_text(doc))
        if args.html:
            print(f"page: {args.html}")
    return 0


def cmd_list(args) -> int:
    from lockscope import workloads

    cat = workloads.catalog()
    fss = {name: scratch.availability(name) for name in scratch.FS_SETUPS}
    if args.json:
        json.dump({"workloads": list(cat.values()),
                   "fs": [{"name": n, "description": scratch.FS_SETUPS[n].description, "available": ok,
                           "reason": why} for n, (ok, why) in fss.items()]}, sys.stdout, indent=1)
        print()
        return 0
    print("workloads:")
    for w in cat.values():
        print(f"  {w['name']:<8} {w['operation']}\n           sharing: {w['sharing']}; stresses: {w['component']}"
              + ("; threads of one process" if w.get("model") == "thread" else ""))
        if len(w.get("op_names", [])) > 1:
            print(f"         operations timed: {', '.join(w['op_names'])}")
        for p in w.get("params", []):
            print(f"         --param {p['name']}=N  {p['help']} (default {p['default']}, {p['min']}..{p['max']})")
        if w.get("many_tasks"):
            print(f"         up to {w['max_workers']} workers without --force (they mostly sleep in I/O)")
    print("\nfile systems (--fs):")
    for name, (ok, why) in fss.items():
        print(f"  {name:<14} {scratch.FS_SETUPS[name].description}" + ("" if ok else f"  [unavailable: {why}]"))
    return 0


def cmd_doctor(args) -> int:
    from lockscope.doctor import diagnose, render

    if args.clean:
        for line in scratch.clean_leftovers(args.scratch) or ["nothing to clean"]:
            print(line)
        return 0
    checks = diagnose(args.scratch)
    if args.json:
        json.dump(checks, sys.stdout, indent=1)
        print()
    else:
        print(render(checks))
    return 0 if checks["ready"] else 3


# ---- entry point ----------------------------------------------------------

def _install_signal_handlers() -> None:
    def on_signal(signum, frame):
        # first signal: unwind (probes, workers, mounts are released on the
        # way out); later ones are ignored so that the cleanup can finish
        for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(s, signal.SIG_IGN)
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Interrupted(signum)

    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(s, on_signal)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, command = split_command(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        return EXIT_USAGE
    if command is not None and args.cmd not in ("run", "sweep"):
        parser.error(f"'--' and a command only go with run and sweep, not {args.cmd}")
    _install_signal_handlers()
    try:
        if args.cmd == "run":
            return cmd_run(args, command)
        if args.cmd == "sweep":
            return cmd_sweep(args, command)
        return {"analyze": cmd_analyze, "report": cmd_report, "list": cmd_list, "doctor": cmd_doctor,
                "export": cmd_export, "compare": cmd_compare}[args.cmd](args)
    except LockscopeError as e:
        print(f"lockscope: error: {e.message}", file=sys.stderr)
        if e.fix:
            print(f"  fix: {e.fix}", file=sys.stderr)
        return e.exit_code
    except (KeyboardInterrupt, Interrupted) as e:
        sig = "SIGINT" if isinstance(e, KeyboardInterrupt) else signal.Signals(e.signum).name
        print(f"lockscope: interrupted ({sig}); probes, workers and file systems were released, "
              "finished points are kept", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
