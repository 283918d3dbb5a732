"""The run-record schema: round trip, atomic writes, clear errors."""
import json
import os

import pytest

from conftest import DATA, load
from lockscope import atomicio
from lockscope.model import jsondata, probedata, record


def test_round_trip_keeps_every_field():
    path = DATA / "mwrm_mmap_tmpfs" / "runs" / "MWRM-tmpfs-w2.json"
    original = json.loads(path.read_text())
    again = record.to_dict(record.load(path))
    assert again == original
    assert again["locks"][0]["class"] == "sb->s_vfs_rename_mutex"   # 'class' is the JSON key


def test_record_has_the_documented_fields():
    rec = record.to_dict(load("mwrm_mmap_tmpfs/MWRM-tmpfs-w2"))
    for key in ("schema", "workload", "fs", "workers", "duration_s", "ops", "ops_per_sec", "cpu", "locks",
                "per_worker", "probe", "cpi", "host", "warnings"):
        assert key in rec
    assert rec["schema"] in record.READS      # recorded as /1: read by the /1 reader
    assert set(rec["cpu"]) >= {"user", "sys", "idle", "iowait"}
    assert sum(rec["cpu"][k] for k in ("user", "sys", "idle", "iowait", "irq", "steal")) == pytest.approx(1, abs=0.01)
    lock = rec["locks"][0]
    for key in ("name", "tier", "kind", "instances", "count", "wait_ns", "max_wait_ns", "wait_share", "stacks"):
        assert key in lock
    assert rec["locks"] == sorted(rec["locks"], key=lambda lk: -lk["wait_ns"])
    assert rec["cpi"] == {"available": False, "reason": rec["cpi"]["reason"]} and rec["cpi"]["reason"]


def test_atomic_write_leaves_old_file_or_new_file_and_no_temp(tmp_path):
    path = tmp_path / "runs" / "x.json"
    atomicio.write_json(path, {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}

    class Boom:
        pass

    with pytest.raises(TypeError):
        atomicio.write_json(path, {"a": Boom()})
    assert json.loads(path.read_text()) == {"a": 1}
    assert os.listdir(path.parent) == ["x.json"]


def test_load_rejects_other_schemas_with_a_message(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps({"schema": "lockscope.run/99"}))
    with pytest.raises(ValueError, match="lockscope.run/99 is not supported"):
        record.load(p)
    p.write_text(json.dumps({"schema": "lockscope.run/1", "workload": "x"}))
    with pytest.raises(ValueError, match="missing field 'id'"):
        record.load(p)


def test_raw_probe_data_is_typed_and_every_recorded_raw_section_round_trips():
    for path in sorted(DATA.glob("*/runs/*.json")):
        original = json.loads(path.read_text())
        rec = record.load(path)
        assert record.to_dict(rec.probe) == original["probe"], path
        raw = rec.probe.raw
        assert all(isinstance(e.lock, int) for e in raw.contention)      # addresses parsed once
        assert all(isinstance(k, int) for k in raw.stacks)
        assert record.to_dict(rec.host) == original["host"] and record.to_dict(rec.cpi) == original["cpi"]
        assert record.to_dict(rec.fs_detail) == original["fs_detail"]


def test_address_text_and_int():
    assert jsondata.parse_addr("0xffff888100440f38") == 0xffff888100440f38
    assert jsondata.parse_addr(16) == 16 and jsondata.parse_addr(None) == 0
    assert jsondata.format_addr(0xffff888100440f38) == "0xffff888100440f38"
    obj = jsondata.from_dict(probedata.FileObject, {"path": "/x", "dev": 7, "i_rwsem": "0x10", "parent_ino": 2})
    assert (obj.path, obj.dev, obj.parent_ino, obj.addresses) == ("/x", 7, 2, {"i_rwsem": 16})
    assert record.to_dict(obj) == {"path": "/x", "tgid": 0, "fd": 0, "ino": 0, "mode": 0, "dev": 7, "fstype": "?",
                                   "parent_ino": 2, "i_rwsem": "0x10"}
