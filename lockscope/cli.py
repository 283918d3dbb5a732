"""The `lockscope` command: main(), signal handling, and one cmd_* function
per subcommand (run, sweep, attach, analyze, report, export, compare, doctor, list).
The command line's grammar is in cliargs, the checks of its values in
validate, and what run and sweep measure in settings."""
from __future__ import annotations

import argparse
import errno
import json
import signal
import sys
from pathlib import Path

from lockscope import atomicio, textout, validate
from lockscope.model import record
from lockscope.machine import scratch
from lockscope.cliargs import build_parser, split_command
from lockscope.errors import EXIT_ENVIRONMENT, EXIT_INTERRUPTED, EXIT_USAGE, Interrupted, LockscopeError


# ---- commands -------------------------------------------------------------

def reclaim(scratch_root) -> None:
    """Before a run: check --scratch, and release what killed lockscope runs
    recorded making (lockscope/machine/ownership.py; nothing of a run still alive,
    nothing it did not record), and say what."""
    from lockscope.machine import ownership
    scratch.check_root(scratch_root)
    for what in ownership.reclaim():
        print(f"lockscope: reclaimed from a killed run: {what}", file=sys.stderr)


def cmd_run(args: argparse.Namespace, command: list[str] | None) -> int:
    from lockscope.measure.runner import run_point
    from lockscope.settings import default_out, point_spec

    spec = point_spec(args, command)
    validate.require_run_environment(spec.probe)
    reclaim(args.scratch)
    out = args.out or default_out(spec.id)
    validate.check_writable_dir(out)       # before anything is mounted or loaded
    rec = run_point(spec)
    return _save_point(rec, out, spec.id, args.json)


def _save_point(rec, out: Path, point_id: str, as_json: bool) -> int:
    """Write one point's run record (atomically) and print it: the end of run and attach."""
    path = record.record_path(out, point_id)
    record.save(rec, path)
    if as_json:
        json.dump(record.to_dict(rec), sys.stdout, indent=1)
        print()
    else:
        print(textout.summarize(rec))
        print(f"record: {path}\nnext:   lockscope report {out}")
    return 0


def cmd_sweep(args: argparse.Namespace, command: list[str] | None) -> int:
    from lockscope.settings import default_out, sweep_spec
    from lockscope.measure.sweep import run_sweep

    spec = sweep_spec(args, command)
    validate.require_run_environment(spec.template.probe)
    reclaim(args.scratch)
    out = args.out or default_out("sweep")
    validate.check_writable_dir(out)       # before anything is mounted or loaded
    outcome = run_sweep(spec, out)
    print(f"{len(outcome.done)} points measured, {len(outcome.skipped)} already there, "
          f"{len(outcome.failed)} failed; results in {out}\nnext: lockscope report {out}")
    for pid, msg in outcome.failed.items():
        print(f"failed: {pid}: {msg}", file=sys.stderr)
    for fs, why in spec.unavailable_fs.items():
        print(f"skipped: file system {fs}: {why}", file=sys.stderr)
    return 1 if outcome.failed else 0


def cmd_attach(args: argparse.Namespace) -> int:
    from lockscope.measure.attach import run_attach
    from lockscope.settings import attach_spec, default_out

    spec = attach_spec(args)                  # no such pid: exit 2
    validate.require_run_environment(True)
    out = args.out or default_out(spec.id)
    validate.check_writable_dir(out)
    rec = run_attach(spec, lambda msg: print(f"  {spec.id}: {msg}", file=sys.stderr, flush=True))
    return _save_point(rec, out, spec.id, args.json)


def cmd_analyze(args) -> int:
    from lockscope.analyzer.analysis_json import to_json
    from lockscope.analyzer.analyze import analyze, load_confirmations, load_records

    recs = load_records(args.dir)
    if args.vmlinux:
        from lockscope import validate
        from lockscope.analyzer.kernel import kimage, naming
        table = kimage.load_symbols(validate.check_vmlinux(args.vmlinux))
        old = [r.id for r in recs if not naming.rename_static(r, table)]
        if old:
            print(f"lockscope: warning: --vmlinux: {len(old)} record(s) have no kernel image bounds "
                  f"(recorded before lockscope named global locks), their names are kept: {', '.join(old[:3])}",
                  file=sys.stderr)
    exps = analyze(recs, load_confirmations(args.dir))
    if args.json:
        json.dump(to_json(exps), sys.stdout, indent=1)
        print()
        return 0
    for e in exps:
        print("\n".join(textout.experiment_lines(e)))
        print()
    return 0


def cmd_confirm(args, command: list[str] | None) -> int:
    from lockscope.model import confirmdata
    from lockscope.analyzer.analyze import analyze, load_records
    from lockscope.analyzer.analysis_json import confirmation_json
    from lockscope.analyzer.analyze import confirm_point
    from lockscope.confirmplan import Choice, plan
    from lockscope.measure.confirm import run_confirm
    from lockscope.measure.confirmruns import run_confirm_per_run
    from lockscope.settings import confirm_options

    kw = confirm_options(args, command)
    exps = analyze(load_records(args.dir))
    specs, skipped = plan(exps, Choice(args.experiment.split(",") if args.experiment else None,
                                       args.workers, args.lock, command), **kw)
    for why in skipped:
        print(f"skipped: {why}", file=sys.stderr)
    if not specs:
        raise LockscopeError("nothing to confirm in " + str(args.dir), "see the reasons above", exit_code=EXIT_USAGE)
    validate.require_run_environment(True)
    reclaim(args.scratch)
    done = []
    for spec in specs:
        say = lambda msg: print(f"  {spec.workload}-{spec.fs}: {msg}", file=sys.stderr, flush=True)  # noqa: E731
        rec = run_confirm_per_run(spec, say) if spec.throughput_regex else run_confirm(spec, say)
        path = confirmdata.path_for(args.dir, spec.workload, spec.fs)
        confirmdata.save(rec, path)
        done.append((confirm_point(exps, rec), path))
    if args.json:
        json.dump([confirmation_json(c) | {"record": str(p)} for c, p in done], sys.stdout, indent=1)
        print()
    else:
        for c, p in done:
            print("\n".join(textout.confirmation_lines(c)) + f"\nrecord: {p}")
    return 0


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
    runs = sum(1 for p in paths if p.parent.name == record.RUNS)
    profiles = [p for p in paths if p.parent.name == "pprof"]
    print(f"exports: {out}\n  {figs} figures (PDF and SVG) in figures/, bottlenecks.csv, bottlenecks.tex, "
          f"analysis.json, {runs} run records in runs/, {len(profiles)} pprof profiles in pprof/ "
          f"(go tool pprof -top FILE):")
    for p in profiles:
        print(f"    pprof/{p.name}")
    return 0


def cmd_compare(args) -> int:
    from lockscope.reports.compare import compare, render_html, render_text

    doc = compare(args.a, args.b, args.fs_a, args.fs_b, args.workload)
    if args.html:
        validate.check_writable_file(args.html, "--html")
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


def _list_params(w: dict) -> None:
    for p in w.get("params", []):
        if "choices" in p:
            print(f"         --param {p['name']}={'|'.join(p['choices'])}  {p['help']} (default {p['default']})")
        else:
            print(f"         --param {p['name']}=N  {p['help']} (default {p['default']}, {p['min']}..{p['max']})")


def cmd_list(args) -> int:
    from lockscope.measure import apps, workloads

    cat = workloads.catalog()
    app_entries = [a.catalog_entry() for a in apps.table().values()]
    fss = {name: scratch.availability(name) for name in scratch.FS_SETUPS}
    if args.json:
        json.dump({"workloads": list(cat.values()) + app_entries,
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
        _list_params(w)
        if w.get("many_tasks"):
            print(f"         up to {w['max_workers']} workers without --force (they mostly sleep in I/O)")
    print("\napplications (programs from Debian packages, run as commands on --fs; throughput from their output):")
    for w in app_entries:
        state = "installed" if w["installed"] else f"NOT INSTALLED ({w['missing']}): {w['install']}"
        print(f"  {w['name']:<18} {w['operation']}\n"
              f"           sharing: {w['sharing']}; stresses: {w['component']}"
              + ("; threads of one process" if w["model"] == "thread" else "") +
              f"\n           package {w['package']}: {state}; throughput in {w['unit']}")
        _list_params(w)
    print("\nfile systems (--fs):")
    for name, (ok, why) in fss.items():
        print(f"  {name:<14} {scratch.FS_SETUPS[name].description}" + ("" if ok else f"  [unavailable: {why}]"))
    return 0


def cmd_doctor(args) -> int:
    from lockscope.doctor import diagnose, render

    if args.clean:
        from lockscope.machine import ownership
        for line in ownership.reclaim() or ["nothing to clean"]:
            print(line)
        for run in ownership.survey()["in_use"]:
            print(f"in use by run {run['pid']} ({run['command']}): left alone")
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


def _os_error(e: OSError) -> int:
    """A file system refused a write or a read lockscope's checks could not
    foresee (the disk filled up, a mount turned read-only): one line, and
    exit 3 for what the machine lacks (space), else 2 (the path)."""
    where = f": {e.filename}" if e.filename else ""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        print(f"lockscope: error: no space left on the device{where}", file=sys.stderr)
        print("  fix: free space and rerun the same command: finished points are kept and skipped",
              file=sys.stderr)
        return EXIT_ENVIRONMENT
    print(f"lockscope: error: {e.strerror or e}{where}", file=sys.stderr)
    return EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, command = split_command(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.cmd is None:
        parser.print_help()
        return EXIT_USAGE
    if command is not None and args.cmd not in ("run", "sweep", "confirm"):
        parser.error(f"'--' and a command only go with run, sweep and confirm, not {args.cmd}")
    _install_signal_handlers()
    from lockscope.analyzer import analyze
    analyze.SKIPPED.clear()
    try:
        if args.cmd == "run":
            code = cmd_run(args, command)
        elif args.cmd == "sweep":
            code = cmd_sweep(args, command)
        elif args.cmd == "attach":
            code = cmd_attach(args)
        elif args.cmd == "confirm":
            code = cmd_confirm(args, command)
        elif args.cmd == "top":
            from lockscope.top.command import cmd_top
            code = cmd_top(args)
        else:
            code = {"analyze": cmd_analyze, "report": cmd_report, "list": cmd_list, "doctor": cmd_doctor,
                    "export": cmd_export, "compare": cmd_compare}[args.cmd](args)
        if analyze.SKIPPED and code == 0:
            # README, "Troubleshooting": bad records are skipped with a warning
            # each, the output holds the others, and the exit code says so
            print(f"lockscope: error: {len(analyze.SKIPPED)} unreadable run record"
                  f"{'s were' if len(analyze.SKIPPED) > 1 else ' was'} skipped (named above); "
                  "the output holds the other points", file=sys.stderr)
            return EXIT_USAGE
        return code
    except LockscopeError as e:
        print(f"lockscope: error: {e.message}", file=sys.stderr)
        if e.fix:
            print(f"  fix: {e.fix}", file=sys.stderr)
        return e.exit_code
    except OSError as e:
        if isinstance(e, BrokenPipeError):
            return 0
        return _os_error(e)
    except (KeyboardInterrupt, Interrupted) as e:
        sig = "SIGINT" if isinstance(e, KeyboardInterrupt) else signal.Signals(e.signum).name
        print(f"lockscope: interrupted ({sig}); probes, workers and file systems were released, "
              "finished points are kept", file=sys.stderr)
        return EXIT_INTERRUPTED
