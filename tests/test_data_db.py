"""Databases: the LMDB and LevelDB backends behind the Data layer and the tools."""

import builtins
import os

import lmdb
import pytest

from pycaffe_lite.data import db as dbmod
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.registry import DB_BACKENDS


def _write_raw_lmdb(path, pairs):
    """An LMDB written with the lmdb package directly (the independent reference)."""
    env = lmdb.open(str(path), map_size=1 << 22)
    with env.begin(write=True) as txn:
        for k, v in pairs:
            txn.put(k, v)
    env.close()


def test_backends_registered_under_dataparameter_names():
    assert "lmdb" in DB_BACKENDS and "leveldb" in DB_BACKENDS
    assert dbmod.backend_name(caffe_pb2.DataParameter.LMDB) == "lmdb"
    assert dbmod.backend_name(caffe_pb2.DataParameter.LEVELDB) == "leveldb"
    assert dbmod.backend_name("LMDB") == "lmdb"
    with pytest.raises(dbmod.DBError, match="unknown database backend 7"):
        dbmod.backend_name(7)
    with pytest.raises(dbmod.DBError, match="did you mean 'lmdb'"):
        dbmod.backend_name("lmbd")


def test_lmdb_read_in_key_order_and_seek(tmp_path):
    pairs = [(b"%08d" % i, b"value-%d" % (i * i)) for i in (3, 0, 2, 1)]
    _write_raw_lmdb(tmp_path / "db", pairs)
    with dbmod.open_db(tmp_path / "db", "lmdb") as db:
        assert db.count() == 4
        cur = db.cursor()
        assert [(k, v) for k, v in cur] == sorted(pairs)
        assert not cur.valid
        cur.seek_to_first()
        assert cur.key() == b"00000000"
        assert cur.seek(b"00000002") and cur.value() == b"value-4"
        cur.next()
        assert cur.key() == b"00000003"
        assert not cur.seek(b"nope") and cur.key() == b"00000000"
        cur.close()


def test_read_run_gives_what_key_value_and_next_give_in_turn(tmp_path):
    pairs = [(b"%08d" % i, b"v%d" % i) for i in range(5)]
    _write_raw_lmdb(tmp_path / "db", pairs)
    with dbmod.open_db(tmp_path / "db", "lmdb") as db:
        cur = db.cursor()
        cur.next()
        assert cur.read_run(3) == pairs[1:4] and cur.valid and cur.key() == b"00000004"
        assert cur.read_run(3) == pairs[4:] and not cur.valid
        assert cur.read_run(2) == []
        cur.seek_to_first()
        assert cur.read_run(0) == [] and cur.key() == b"00000000"
        cur.close()
        with pytest.raises(dbmod.DBError, match="closed"):
            cur.read_run(1)


def _data_net(tmp_path, source, batch):
    import pycaffe_lite as caffe
    path = tmp_path / "data.prototxt"
    path.write_text('layer { name: "d" type: "Data" top: "x" top: "y" data_param { source: '
                    '"%s" batch_size: %d backend: LMDB prefetch: 0 } }' % (source, batch))
    return caffe.Net(str(path), caffe.TRAIN)


def test_the_data_layer_reads_records_in_key_order_and_starts_again_at_the_end(tmp_path):
    values = [float(i * i) for i in range(10)]
    pairs = [(b"%08d" % i, caffe_pb2.Datum(channels=1, height=1, width=1, float_data=[v],
                                            label=i).SerializeToString())
             for i, v in enumerate(values)]
    _write_raw_lmdb(tmp_path / "db", reversed(pairs))  # the key order, not the writing order
    net = _data_net(tmp_path, tmp_path / "db", 4)
    seen = []
    for _ in range(3):
        net.forward()
        seen += list(net.blobs["y"].data)
    assert seen == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1]
    assert net.blobs["x"].data.ravel().tolist() == [64, 81, 0, 1]
    assert net.layers[0].get_state()["position"] == 2
    net.layers[0].close()


def test_a_broken_record_in_a_batch_is_named_by_the_data_layer(tmp_path):
    from pycaffe_lite.errors import CaffeError
    good = caffe_pb2.Datum(channels=1, height=1, width=2, data=b"\x01\x02")
    pairs = [(b"%08d" % i, good.SerializeToString()) for i in range(6)]
    pairs[5] = (pairs[5][0], pairs[5][1][:-1])
    _write_raw_lmdb(tmp_path / "db", pairs)
    net = _data_net(tmp_path, tmp_path / "db", 3)
    net.forward()
    with pytest.raises(CaffeError, match=r"record 5 \(key b'00000005'\) of source '.*db' is "
                                         r"not a Datum"):
        net.forward()
    net.layers[0].close()


def test_lmdb_write_commits_in_batches_and_grows_the_map(tmp_path):
    path = tmp_path / "big"
    value = os.urandom(50_000)
    # an initial map of 64 KiB, far too small for 400 records of 50 kB (20 MB)
    with dbmod.LMDB(path, dbmod.NEW, map_size=1 << 16) as db:
        txn = db.transaction()
        for i in range(400):
            txn.put("%08d" % i, value[:-1] + bytes([i % 256]))
            if (i + 1) % 100 == 0:
                txn.commit()
        txn.commit()
    env = lmdb.open(str(path), readonly=True, lock=False)
    with env.begin() as t:
        assert t.stat()["entries"] == 400
        assert t.get(b"00000399")[-1] == 399 % 256
    assert env.info()["map_size"] >= 20_000_000
    env.close()


def test_lmdb_new_refuses_existing_and_read_refuses_missing(tmp_path):
    _write_raw_lmdb(tmp_path / "db", [(b"a", b"1")])
    with pytest.raises(dbmod.DBError, match="already exists"):
        dbmod.open_db(tmp_path / "db", "lmdb", dbmod.NEW)
    with pytest.raises(dbmod.DBError, match=r"'.*missing' not found \(backend LMDB\)"):
        dbmod.open_db(tmp_path / "missing", "lmdb")
    (tmp_path / "folder").mkdir()
    with pytest.raises(dbmod.DBError, match="is not a LMDB database"):
        dbmod.open_db(tmp_path / "folder", "lmdb")


def test_lmdb_write_mode_appends(tmp_path):
    with dbmod.open_db(tmp_path / "db", "lmdb", dbmod.WRITE) as db:
        txn = db.transaction()
        txn.put(b"b", b"2")
        txn.commit()
    with dbmod.open_db(tmp_path / "db", "lmdb", dbmod.WRITE) as db:
        txn = db.transaction()
        txn.put(b"a", b"1")
        txn.commit()
    with dbmod.open_db(tmp_path / "db", "lmdb") as db:
        assert list(db.cursor()) == [(b"a", b"1"), (b"b", b"2")]
        with pytest.raises(dbmod.DBError, match="open for reading only"):
            db.transaction()


def test_empty_lmdb_cursor_is_invalid(tmp_path):
    with dbmod.open_db(tmp_path / "db", "lmdb", dbmod.NEW) as db:
        db.transaction().commit()
    with dbmod.open_db(tmp_path / "db", "lmdb") as db:
        assert not db.cursor().valid
        assert db.count() == 0


def test_readers_of_one_path_share_a_handle(tmp_path):
    _write_raw_lmdb(tmp_path / "db", [(b"k", b"v")])
    a = dbmod.open_db(tmp_path / "db", "lmdb")
    b = dbmod.open_db(str(tmp_path / "db") + "/", "lmdb")
    assert a.env is b.env
    a.close()
    assert b.cursor().value() == b"v"  # still open for the other reader
    b.close()


def test_a_database_the_program_holds_open_is_named_with_what_to_do(tmp_path):
    """A script that counts entries with its own ``lmdb.open`` and then builds a net on the
    same folder: the lmdb package refuses a second open in one process; the error says
    which database and that the program's own handle must be closed first."""
    _write_raw_lmdb(tmp_path / "db", [(b"k", b"v")])
    own = lmdb.open(str(tmp_path / "db"), readonly=True)
    try:
        with pytest.raises(dbmod.DBError) as err:
            dbmod.open_db(tmp_path / "db", "lmdb")
        assert str(tmp_path / "db") in str(err.value)
        assert "env.close()" in str(err.value)
    finally:
        own.close()
    reader = dbmod.open_db(tmp_path / "db", "lmdb")
    assert reader.cursor().value() == b"v"
    reader.close()


def test_wrong_backend_is_named(tmp_path):
    _write_raw_lmdb(tmp_path / "db", [(b"k", b"v")])
    with pytest.raises(dbmod.DBError, match="looks like a LMDB database, not LEVELDB: set "
                                            "backend: LMDB"):
        dbmod.open_db(tmp_path / "db", "leveldb")
    (tmp_path / "ldb").mkdir()
    (tmp_path / "ldb" / "CURRENT").write_text("MANIFEST-000001\n")
    with pytest.raises(dbmod.DBError, match="looks like a LEVELDB database, not LMDB"):
        dbmod.open_db(tmp_path / "ldb", "lmdb")


def hide_plyvel(monkeypatch):
    """Imports of plyvel fail from now on in this test, as where it is not installed."""
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "plyvel":
            raise ImportError("No module named 'plyvel'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)


def test_missing_plyvel_says_how_to_install(tmp_path, monkeypatch):
    hide_plyvel(monkeypatch)
    with pytest.raises(dbmod.DBError, match=r"pip install plyvel"):
        dbmod.open_db(tmp_path / "ldb", "leveldb", dbmod.NEW)


def test_a_wrong_backend_or_path_is_named_before_plyvel_is_asked_for(tmp_path, monkeypatch):
    """An LMDB folder read with backend LEVELDB where plyvel is not installed: the backend is
    what is wrong (installing plyvel would not help), as a path that does not exist."""
    _write_raw_lmdb(tmp_path / "db", [(b"k", b"v")])
    hide_plyvel(monkeypatch)
    with pytest.raises(dbmod.DBError, match="looks like a LMDB database, not LEVELDB: set "
                                            "backend: LMDB"):
        dbmod.open_db(tmp_path / "db", "leveldb")
    with pytest.raises(dbmod.DBError, match="database '.*nowhere' not found"):
        dbmod.open_db(tmp_path / "nowhere", "leveldb")


def test_leveldb_round_trip(tmp_path):
    plyvel = pytest.importorskip("plyvel")
    path = tmp_path / "ldb"
    with dbmod.open_db(path, "leveldb", dbmod.NEW) as db:
        txn = db.transaction()
        for i in (2, 0, 1):
            txn.put("%08d" % i, b"v%d" % i)
        assert len(txn) == 3
        txn.commit()
    raw = plyvel.DB(str(path))
    assert list(raw) == [(b"%08d" % i, b"v%d" % i) for i in range(3)]
    raw.close()
    with dbmod.open_db(path, "leveldb") as db:
        cur = db.cursor()
        assert [k for k, _ in cur] == [b"00000000", b"00000001", b"00000002"]
        assert cur.seek(b"00000001") and cur.value() == b"v1"
        assert not cur.seek(b"zzz") and cur.key() == b"00000000"
        cur.close()
