import json
import subprocess
import sys
import textwrap

import pytest

from tvm_hetero.profiling.db import ProfileDB, ProfileDBError
from tvm_hetero.records import Fingerprint, ProfileRecord, RecordKind

FP = Fingerprint("cpu", "Test CPU [znver3]", 2, "0.27.0.post1")
OTHER = Fingerprint("cpu", "Other CPU", 2, "0.27.0.post1")


def _record(key="w1", fp=FP, samples=(1e-3, 2e-3, 3e-3), mode="default", created=1.0):
    return ProfileRecord(RecordKind.OP, key, {"op": "relax.matmul"}, '{"kind": "llvm"}', mode,
                         fp.to_dict(), fp.key, tuple(samples), 4, len(samples), created=created)  # fmt: skip


def test_record_json_round_trip_and_stats():
    r = _record(samples=(1.0, 2.0, 3.0, 10.0))
    assert ProfileRecord.from_json(r.to_json()) == r
    assert r.median_s == 2.5
    assert r.percentile_s(99) == pytest.approx(9.79)
    assert r.measured
    with pytest.raises(ValueError, match="not a profile record"):
        ProfileRecord.from_json('{"kind": "op"}')


def test_db_round_trip_lookup_and_device_isolation(tmp_path):
    db = ProfileDB(tmp_path / "p.jsonl")
    assert db.add([_record(), _record(created=2.0, samples=(5e-3,))]) == 2
    assert db.add([_record()]) == 0  # duplicate
    again = ProfileDB(tmp_path / "p.jsonl")
    assert len(again) == 2
    key = (RecordKind.OP, "w1", '{"kind": "llvm"}', "default")
    assert again.lookup(*key, FP.key).samples_s == (5e-3,)  # newest wins
    assert again.lookup(*key, OTHER.key) is None  # another device is never mixed in
    assert again.lookup(RecordKind.OP, "w1", '{"kind": "llvm"}', "metaschedule", FP.key) is None
    assert Fingerprint("cpu", "Test CPU [znver3]", 2, "0.28").key != FP.key  # TVM version counts


def test_merge(tmp_path):
    a, b = ProfileDB(tmp_path / "a.jsonl"), ProfileDB(tmp_path / "b.jsonl")
    a.add([_record("w1"), _record("w2")])
    b.add([_record("w2"), _record("w3", fp=OTHER)])
    assert a.merge(b) == 1
    assert {r.workload_key for r in ProfileDB(a.path)} == {"w1", "w2", "w3"}


def test_corrupted_line_is_named_and_others_survive(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text(_record("w1").to_json() + "\n{broken json\n" + _record("w2").to_json() + "\n")
    db = ProfileDB(path)
    assert len(db) == 2
    assert db.problems == [
        f"{path}:2: not a profile record: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    ]
    with pytest.raises(ProfileDBError, match=rf"{path}:2: not a profile record"):
        ProfileDB(path, strict=True)


def test_a_record_after_a_cut_short_line_starts_on_its_own_line(tmp_path):
    path = tmp_path / "p.jsonl"
    whole = _record("w1").to_json()
    path.write_text(whole + "\n" + _record("w2").to_json()[:40])  # a writer killed mid-record
    db = ProfileDB(path)
    assert len(db) == 1 and len(db.problems) == 1
    assert db.add([_record("w3")]) == 1
    again = ProfileDB(path)
    assert {r.key[1] for r in again} == {"w1", "w3"} and len(again.problems) == 1
    assert db.add([_record("w4")]) == 1  # the file now ends whole: no blank line is added
    assert path.read_text().count("\n\n") == 0 and len(ProfileDB(path)) == 3


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path = tmp_path / "p.jsonl"
    code = textwrap.dedent(f"""
        import sys
        from tvm_hetero.profiling.db import ProfileDB
        from tvm_hetero.records import Fingerprint
        from tvm_hetero.records import ProfileRecord, RecordKind
        fp = Fingerprint("cpu", "x", 1, "t")
        db = ProfileDB({str(path)!r})
        tag = sys.argv[1]
        for i in range(300):
            db.add([ProfileRecord(RecordKind.OP, f"{{tag}}{{i}}", {{"pad": "x" * 2000}}, "t", "default",
                                  fp.to_dict(), fp.key, (1e-3,), 1, 1)])
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code, tag]) for tag in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    db = ProfileDB(path, strict=True)
    assert len(db) == 600
    assert not db.problems


def test_import_published_profiles(tmp_path):
    rows = [
        {"device": "PIM", "op": "MatMul", "shape": "1x128x768", "time_ms": 0.21},
        {"device": "PIM", "op": "Gelu", "shape": "1x128x3072", "time_s": 4e-5},
    ]
    path = tmp_path / "pim.json"
    path.write_text(json.dumps(rows))
    db = ProfileDB(tmp_path / "p.jsonl")
    assert db.import_published(path, "kim2023-table2") == 2
    records = sorted(ProfileDB(db.path), key=lambda r: r.workload["op"])
    assert [r.measured for r in records] == [False, False]
    assert records[1].median_s == pytest.approx(2.1e-4)
    assert records[0].source == "published:kim2023-table2"
    assert records[0].fingerprint["kind"] == "simulated"
    (tmp_path / "bad.csv").write_text("device,op\nPIM,MatMul\n")
    with pytest.raises(ProfileDBError, match=r"bad.csv:1: needs device, op and time_ms or time_s"):
        db.import_published(tmp_path / "bad.csv", "x")


def test_cpu_model_tells_generations_of_one_marketing_name_apart(tmp_path):
    from tvm_hetero.records import cpu_model

    def info(name: str, family: int, model: int) -> str:
        path = tmp_path / name
        path.write_text(f"processor\t: 0\ncpu family\t: {family}\nmodel\t\t: {model}\n"
                        f"model name\t: AMD EPYC\nstepping\t: 1\n\nprocessor\t: 1\n"
                        f"model name\t: other\n")  # fmt: skip
        return str(path)

    zen3, zen5 = cpu_model(info("zen3", 25, 1)), cpu_model(info("zen5", 26, 2))
    assert zen3 == "AMD EPYC (family 25, model 1, stepping 1)"
    assert zen5 == "AMD EPYC (family 26, model 2, stepping 1)"
    assert cpu_model(str(tmp_path / "absent")) != ""  # falls back to the platform's name
