"""The TOML tables lockscope ships, all read by one loader (lockscope/tables.py):
every one loads, and a bad entry in a copy of one is an error naming the
file, the table and the entry, which the command line shows with its fix
and exit code 1. No kernel needed."""
import re
import signal

import pytest

from conftest import REPO
from lockscope import proberows, tables
from lockscope.analyzer import sleepkinds
from lockscope.analyzer.kernel import knowledge, ktext, lockfields, objlocks
from lockscope.analyzer.user import golocks, libraries, pylayouts, runtimes, usdt
from lockscope.errors import EXIT_FAILURE, TableError
from lockscope.measure import apps


def _cached(module, load):
    """The loader of a module that reads its table (module.TABLE) once."""
    def run(path):
        old = module.TABLE
        module.TABLE = path
        load.cache_clear()
        try:
            return load()
        finally:
            module.TABLE = old
            load.cache_clear()
    return run


# every table shipped, by its path in the tree, and what reads it (given a path)
LOADERS = {
    "lockscope/measure/apps.toml": _cached(apps, apps.table),
    "analyzer/user/libraries.toml": lambda p: libraries.Libraries(p).libraries,
    "analyzer/user/gosync.toml": lambda p: _cached(golocks, golocks.table)(p).semacquire,
    "analyzer/user/runtimes.toml": lambda p: runtimes.Table.load(p).locks,
    "analyzer/user/usdt.toml": lambda p: usdt.Table.load(p).programs,
    "analyzer/kernel/globals.toml": _cached(ktext, ktext.table),
    "analyzer/kernel/fileobjects.toml": lambda p: objlocks.load(p).by_release,
    "analyzer/kernel/locks.toml": lambda p: knowledge.Knowledge(p).rules,
    "analyzer/kernel/lockfields.toml": lambda p: lockfields.load(p).fields,
    "analyzer/sleepkinds.toml": lambda p: sleepkinds.SleepKinds(p).futex_rules,
    "analyzer/user/pylayouts.toml": lambda p: pylayouts.load(p),
    "lockscope/proberows.toml": lambda p: proberows.load(p).row,
}


def test_every_shipped_table_has_a_loader_here():
    shipped = {str(p.relative_to(REPO)) for folder in ("lockscope", "analyzer")
               for p in (REPO / folder).rglob("*.toml")}
    assert shipped == set(LOADERS)


@pytest.mark.parametrize("name", sorted(LOADERS))
def test_every_shipped_table_loads(name):
    assert LOADERS[name](REPO / name)


def edit(old: str, new: str, count: int = 1):
    def change(text: str) -> str:
        assert old in text, f"the table no longer has {old!r}: update this test"
        return text.replace(old, new, count)
    return change


def append(extra: str):
    return lambda text: text + "\n" + extra + "\n"


def first_loaded_by(text: str) -> str:
    return re.search(r'loaded_by = \["([^"]+)"', text)[1]


# (table, how its copy is spoiled, what the error says after the file's name)
BAD = [
    ("wrong type", "analyzer/sleepkinds.toml",
     edit('functions = ["pthread_spin_lock"]', 'functions = "pthread_spin_lock"'),
     r"\[\[spin\]\] #\d+ \(pthread_spinlock\): field functions: expected a list, got a string 'pthread_spin_lock'"),
    ("an item's type", "analyzer/sleepkinds.toml", append('[[spin]]\nprimitive = "x"\nfunctions = ["a", 3]'),
     r"\[\[spin\]\] #\d+ \(x\): field functions\[1\]: expected a string, got an integer 3"),
    ("missing keys", "analyzer/sleepkinds.toml", append('[[futex]]\nprimitive = "x"'),
     r"\[\[futex\]\] #\d+ \(x\): missing functions, kind"),
    ("unknown table", "analyzer/sleepkinds.toml", append('[[spinn]]\nprimitive = "x"'),
     r"\[\[spinn\]\]: unknown table \(this file has classes, futex, spin\)"),
    ("unknown key", "analyzer/kernel/locks.toml", edit("[[rule]]\n", '[[rule]]\ncolour = "red"\n'),
     r"\[\[rule\]\] #1 \([^)]+\): unknown keys colour"),
    ("own check", "analyzer/kernel/locks.toml",
     edit('name = "rename_lock"\n', 'name = "rename_lock"\ndynamic = true\n'),
     r"\[\[rule\]\] #1 \(rename_lock\): both global and dynamic"),
    ("a table of values", "analyzer/kernel/locks.toml",
     edit('ext4_inode_cache = "ext4_inode_info"', "ext4_inode_cache = 3"),
     r"\[slab\]: field ext4_inode_cache: expected a string, got an integer 3"),
    ("one table", "analyzer/user/gosync.toml", edit('frames = ["sync.(*RWMutex).Lock"]', 'frames = "x"'),
     r"\[rwmutex\]: field frames: expected a list"),
    ("a named entry", "analyzer/kernel/fileobjects.toml",
     edit('release = ["pipe_release"]', 'release = "pipe_release"'),
     r"\[kind\.pipe\]: field release: expected a list, got a string 'pipe_release'"),
    ("a nested entry", "analyzer/user/usdt.toml", edit("name_arg = 5", 'name_arg = "5"'),
     r"\[\[program\]\] #1 \(PostgreSQL\): field probe\[1\]\.name_arg: expected an integer, got a string '5'"),
    ("a nested check", "analyzer/user/usdt.toml", edit("name_arg = 5", "name_arg = 13"),
     r"\[\[program\]\] #1 \(PostgreSQL\): \[\[program\.probe\]\] #2 \(lock__wait__start\): name_arg must be 1\.\.12"),
    ("a cross-reference", "analyzer/kernel/lockfields.toml", edit('base = "inode"', 'base = "inod"'),
     r"\[\[field\]\] #1 \(\w+\): base 'inod' is not one of \['inode', "),
    ("listed twice", "analyzer/kernel/globals.toml",
     lambda t: t + f'\n[[global]]\nvariable = "x"\nloaded_by = ["{first_loaded_by(t)}"]\ncomponent = "c"\n'
                   'explain = "e"\n',
     r"\[\[global\]\] #\d+ \(x\): \w+ is listed for \w+ and x"),
    ("a regex", "lockscope/measure/apps.toml", edit("(?m)^fillrandom", "(?m)^(fillrandom"),
     r"\[\[app\]\] #1 \(rocksdb-fillrandom\): throughput_regex does not compile"),
    ("an empty list", "analyzer/user/runtimes.toml", edit('symbols = ["_PyRuntime"]', "symbols = []"),
     r"\[\[lock\]\] #1 \(GIL \(CPython\)\): no symbols"),
    ("no name", "analyzer/user/libraries.toml",
     edit('[[library]]\nname = "GNU C library and dynamic loader"\n', "[[library]]\n"),
     r"\[\[library\]\] #1: missing name"),
    ("not TOML", "analyzer/kernel/globals.toml", append("x = ["), r"not valid TOML: "),
    ("a flag", "analyzer/user/pylayouts.toml", edit('flags = ["pthread_id", "no_owner"]', 'flags = ["pthread"]'),
     r"\[\[layout\]\] #1: flags \['pthread'\] are not among"),
    ("a minor twice", "analyzer/user/pylayouts.toml", edit("minor = 10", "minor = 9"),
     r"\[\[layout\]\] #2: minor 9 has a layout already"),
]


@pytest.mark.parametrize("name,how,message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_entry_names_the_file_the_table_and_the_entry(tmp_path, name, how, message):
    shipped = REPO / name
    copy = tmp_path / shipped.name
    copy.write_text(how(shipped.read_text()))
    with pytest.raises(TableError) as e:
        LOADERS[name](copy)
    assert re.match(re.escape(f"{shipped.name}: ") + message, e.value.message), e.value.message
    assert e.value.fix == f"fix the entry in {copy}"
    assert e.value.exit_code == EXIT_FAILURE and isinstance(e.value, ValueError)   # as the loaders raised


def test_the_fix_names_a_shipped_table_by_its_path_in_the_tree():
    assert tables.error(apps.TABLE, "[[app]] #1", "x").fix == "fix the entry in lockscope/measure/apps.toml"
    assert tables.error(knowledge.RULES_FILE, "", "x").fix == "fix the entry in analyzer/kernel/locks.toml"


def test_an_array_of_tables_must_be_one():
    with pytest.raises(TableError, match=r"^apps.toml: app: expected an array of tables \(\[\[app\]\] entries\)"):
        apps.parse({"app": "x"})


# ---- on the command line ---------------------------------------------------

@pytest.fixture
def cli(monkeypatch):
    """lockscope's main, in this process (its tables patched), its signal
    handlers put back after."""
    from lockscope import cli
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    yield cli.main
    for s, h in handlers.items():
        signal.signal(s, h)


def test_list_with_a_bad_application_table_exits_1_naming_it(tmp_path, monkeypatch, capsys, cli):
    from lockscope.measure import workloads
    bad = tmp_path / "apps.toml"
    bad.write_text(apps.TABLE.read_text().replace('unit = "ops/s (db_bench)"', "unit = 3", 1))
    monkeypatch.setattr(workloads, "catalog", lambda: {})      # the driver need not be built
    monkeypatch.setattr(apps, "TABLE", bad)
    apps.table.cache_clear()
    try:
        assert cli(["list"]) == EXIT_FAILURE
    finally:
        monkeypatch.undo()
        apps.table.cache_clear()
    err = capsys.readouterr().err
    assert err == ("lockscope: error: apps.toml: [[app]] #1 (rocksdb-fillrandom): field unit: expected a string, "
                   f"got an integer 3\n  fix: fix the entry in {bad}\n")


def test_export_with_a_bad_sleep_kinds_table_exits_1_naming_it(tmp_path, monkeypatch, capsys, cli):
    import shutil
    results = tmp_path / "pool"
    shutil.copytree(REPO / "tests" / "data" / "pool", results)
    bad = tmp_path / "sleepkinds.toml"
    bad.write_text(append('[[spin]]\nprimitive = "x"\nfunctions = ["f"]\nattach = "kinds"')(
        sleepkinds.TABLE_FILE.read_text()))
    monkeypatch.setattr(sleepkinds, "default", lambda: sleepkinds.SleepKinds(bad))
    assert cli(["export", str(results)]) == EXIT_FAILURE
    err = capsys.readouterr().err
    assert re.match(r"lockscope: error: sleepkinds.toml: \[\[spin\]\] #\d+ \(x\): attach is \"kind\" or left out, "
                    r"not 'kinds'\n  fix: fix the entry in " + re.escape(str(bad)) + "\n$", err), err
