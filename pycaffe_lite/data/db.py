"""Key-value databases of records (Caffe's ``db.hpp``): LMDB and LevelDB.

A database is opened with :func:`open_db` (or a backend class from ``DB_BACKENDS``) in one of
three modes: ``READ``, ``WRITE`` (create if missing) or ``NEW`` (must not exist yet). It gives

- a :class:`Cursor` walking the records in key order: ``seek_to_first()``, ``next()``,
  ``valid``, ``key()``, ``value()``, ``seek(key)``;
- a :class:`Transaction` collecting ``put(key, value)`` calls that ``commit()`` writes at once.

LMDB (the ``lmdb`` package) grows its map as needed, so writing never fails with "map full".
LevelDB needs the optional ``plyvel`` package. Backends are registered in
``registry.DB_BACKENDS`` as ``"lmdb"`` and ``"leveldb"``, the names of ``DataParameter.DB``.
"""

import os
import threading
import weakref

from ..errors import CaffeError
from ..proto import caffe_pb2
from ..registry import DB_BACKENDS

READ = "read"
WRITE = "write"
NEW = "new"
MODES = (READ, WRITE, NEW)


class DBError(CaffeError):
    """A database that cannot be opened, read or written."""


def backend_name(backend):
    """``"lmdb"`` or ``"leveldb"`` from a name (any case) or a ``DataParameter.DB`` value."""
    if isinstance(backend, int):
        if backend == caffe_pb2.DataParameter.LMDB:
            return "lmdb"
        if backend == caffe_pb2.DataParameter.LEVELDB:
            return "leveldb"
        raise DBError("unknown database backend %d (DataParameter.DB is LEVELDB = 0 or "
                      "LMDB = 1)" % backend)
    name = str(backend).lower()
    if name not in DB_BACKENDS:
        raise DBError(DB_BACKENDS.unknown_message(name, "database backend"))
    return name


def open_db(source, backend="lmdb", mode=READ, **options):
    """Open the database at ``source`` with the named backend."""
    cls = DB_BACKENDS.get(backend_name(backend))
    return cls(source, mode, **options)


def _as_bytes(key):
    if isinstance(key, bytes):
        return key
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    return str(key).encode("utf-8")


def _looks_like(path):
    """'lmdb', 'leveldb' or None, from the files in a database folder."""
    try:
        names = set(os.listdir(path))
    except OSError:
        return None
    if "data.mdb" in names:
        return "lmdb"
    if "CURRENT" in names:
        return "leveldb"
    return None


def _check_source(source, mode, backend):
    if mode not in MODES:
        raise DBError("unknown database mode %r (use read, write or new)" % (mode,))
    if mode == READ:
        if not os.path.exists(source):
            where = "" if os.path.isabs(source) else \
                " (a relative path: from the working directory %s)" % os.getcwd()
            raise DBError("database '%s' not found (backend %s): the path does not exist%s; "
                          "check the source path or create the database with "
                          "convert_imageset / convert_mnist" % (source, backend.upper(), where))
        kind = _looks_like(source)
        if kind is not None and kind != backend:
            raise DBError("database '%s' looks like a %s database, not %s: set backend: %s in "
                          "data_param (or --backend %s)"
                          % (source, kind.upper(), backend.upper(), kind.upper(), kind))
        if kind is None:
            raise DBError("'%s' is not a %s database (no %s inside)"
                          % (source, backend.upper(),
                             "data.mdb" if backend == "lmdb" else "CURRENT file"))
    elif mode == NEW and os.path.exists(source):
        raise DBError("database '%s' already exists: remove it or choose another name"
                      % source)


class Cursor:
    """Walks the records in key order.

    Every call is serialised with :meth:`close` by a lock, and a call after ``close()`` raises
    a :class:`DBError`: a closed handle is never passed to the native library. Backends
    implement the underscored methods.
    """

    valid = False

    def __init__(self, source):
        self.source = source
        self._lock = threading.Lock()
        self._closed = False

    def _call(self, fn, *args):
        with self._lock:
            if self._closed:
                raise DBError("the cursor of database '%s' is closed" % self.source)
            return fn(*args)

    def seek_to_first(self):
        self._call(self._seek_to_first)

    def next(self):
        self._call(self._next)

    def key(self):
        return self._call(self._key)

    def value(self):
        return self._call(self._value)

    def seek(self, key):
        """Go to ``key``; True if it exists (else the cursor is left at the first record)."""
        return self._call(self._seek, _as_bytes(key))

    def read_run(self, n):
        """Up to ``n`` ``(key, value)`` pairs from the current record on, the cursor left
        after the last one (``valid`` False once the end was passed): what ``key()``,
        ``value()`` and ``next()`` in turn give, under one acquisition of the lock."""
        return self._call(self._read_run, int(n))

    def _read_run(self, n):
        out = []
        while len(out) < n and self.valid:
            out.append((self._key(), self._value()))
            self._next()
        return out

    def close(self):
        """Release the cursor; closing twice does nothing."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self.valid = False
                self._close()

    @property
    def closed(self):
        return self._closed

    def _seek_to_first(self):
        raise NotImplementedError

    def _next(self):
        raise NotImplementedError

    def _key(self):
        raise NotImplementedError

    def _value(self):
        raise NotImplementedError

    def _seek(self, key):
        raise NotImplementedError

    def _close(self):
        pass

    def __iter__(self):
        """(key, value) pairs from the current record to the end."""
        while self.valid:
            yield self.key(), self.value()
            self.next()


class Transaction:
    """Puts collected in memory and written together by ``commit()``."""

    def __init__(self):
        self._pending = []

    def put(self, key, value):
        self._pending.append((_as_bytes(key), bytes(value)))

    def __len__(self):
        return len(self._pending)

    def commit(self):
        raise NotImplementedError


class DB:
    """Base of the database backends."""

    name = None

    def __init__(self, source, mode=READ):
        self.source = os.fspath(source)
        self.mode = mode
        self._cursors = weakref.WeakSet()

    def cursor(self):
        """A new cursor at the first record; ``close()`` closes it if it is still open."""
        if self._closed_handle():
            raise DBError("database '%s' is closed" % self.source)
        cursor = self._open_cursor()
        self._cursors.add(cursor)
        return cursor

    def _open_cursor(self):
        raise NotImplementedError

    def _closed_handle(self):
        return False

    def _close_cursors(self):
        for cursor in list(self._cursors):
            cursor.close()

    def transaction(self):
        raise NotImplementedError

    def count(self):
        """Number of records, or None when the backend cannot tell cheaply."""
        return None

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self):
        return "<%s database '%s' (%s)>" % (self.name, self.source, self.mode)


# ---- shared handles -----------------------------------------------------------------------
# LMDB and LevelDB must not be opened twice by one process; readers of the same path share one
# handle, counted, and the last close() closes it.
_handles = {}
_handles_lock = threading.Lock()


def _after_fork_in_child():
    """The registry's lock may have been held by another thread of the parent at the fork: a
    forked child starts with a free one (the handles stay registered: LMDB refuses to open
    an environment twice in a process, and the child never closes the parent's, whose
    count it inherited)."""
    global _handles_lock
    _handles_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _acquire(kind, path, opener):
    key = (kind, os.path.realpath(path))
    with _handles_lock:
        entry = _handles.get(key)
        if entry is None:
            entry = [opener(), 0]
            _handles[key] = entry
        entry[1] += 1
        return key, entry[0]


def _release(key, closer):
    with _handles_lock:
        entry = _handles.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del _handles[key]
            closer(entry[0])


# ---- LMDB ---------------------------------------------------------------------------------
def _import_lmdb():
    try:
        import lmdb
    except ImportError:
        raise DBError("LMDB databases need the lmdb package: pip install lmdb") from None
    return lmdb


class LMDBCursor(Cursor):
    def __init__(self, env, source):
        super().__init__(source)
        self._txn = env.begin(buffers=False)
        self._cursor = self._txn.cursor()
        self.valid = self._cursor.first()

    def _seek_to_first(self):
        self.valid = self._cursor.first()

    def _next(self):
        self.valid = self._cursor.next()

    def _key(self):
        return self._cursor.key()

    def _value(self):
        return self._cursor.value()

    def _seek(self, key):
        if not self._cursor.set_key(key):
            self.valid = self._cursor.first()
            return False
        self.valid = True
        return True

    def _close(self):
        self._cursor.close()
        self._txn.abort()
        self._cursor = self._txn = None


class LMDBTransaction(Transaction):
    def __init__(self, db):
        super().__init__()
        self._db = db

    def commit(self):
        lmdb = _import_lmdb()
        env = self._db.env
        while True:
            try:
                with env.begin(write=True) as txn:
                    for k, v in self._pending:
                        txn.put(k, v)
                break
            except lmdb.MapFullError:
                # Grow the map and write the batch again (the failed write was rolled back).
                env.set_mapsize(env.info()["map_size"] * 2)
            except lmdb.Error as exc:
                raise DBError("cannot write to LMDB database '%s': %s"
                              % (self._db.source, exc)) from None
        self._pending = []


@DB_BACKENDS.register("lmdb")
class LMDB(DB):
    """LMDB through the ``lmdb`` package (one folder with data.mdb and lock.mdb).

    ``map_size`` is the initial map size for writing (doubled whenever a commit needs more).
    """

    name = "lmdb"

    def __init__(self, source, mode=READ, map_size=1 << 24):
        super().__init__(source, mode)
        lmdb = _import_lmdb()
        _check_source(self.source, mode, "lmdb")
        self._key = None
        try:
            if mode == READ:
                self._key, self.env = _acquire("lmdb", self.source, self._open_read)
            else:
                os.makedirs(self.source, exist_ok=True)
                self.env = lmdb.open(self.source, map_size=int(map_size), subdir=True,
                                     readonly=False, meminit=False, map_async=False)
        except lmdb.Error as exc:
            hint = ""
            if "already open in this process" in str(exc):
                hint = ("; the lmdb package opens a database once per process: close the"
                        " lmdb.Environment this program opened on it (env.close()) first")
            raise DBError("cannot open LMDB database '%s': %s%s"
                          % (self.source, exc, hint)) from None

    def _open_read(self):
        lmdb = _import_lmdb()
        try:
            return lmdb.open(self.source, readonly=True, lock=True, subdir=True,
                             max_readers=512)
        except lmdb.Error:
            # No write access to lock.mdb (a read-only copy): read without locking, as Caffe
            # does when built with ALLOW_LMDB_NOLOCK.
            return lmdb.open(self.source, readonly=True, lock=False, subdir=True)

    def _open_cursor(self):
        return LMDBCursor(self.env, self.source)

    def _closed_handle(self):
        return getattr(self, "env", None) is None

    def transaction(self):
        if self.mode == READ:
            raise DBError("database '%s' is open for reading only" % self.source)
        return LMDBTransaction(self)

    def count(self):
        return int(self.env.stat()["entries"])

    def close(self):
        env = getattr(self, "env", None)
        if env is None:
            return
        self._close_cursors()
        if self._key is not None:
            _release(self._key, lambda e: e.close())
        else:
            env.sync()
            env.close()
        self.env = None


# ---- LevelDB ------------------------------------------------------------------------------
def _import_plyvel():
    try:
        import plyvel
    except ImportError:
        raise DBError("LevelDB databases need the optional plyvel package: pip install plyvel "
                      "(or convert the data to LMDB and set backend: LMDB)") from None
    return plyvel


class LevelDBCursor(Cursor):
    def __init__(self, db, source):
        super().__init__(source)
        self._it = db.iterator(fill_cache=False)
        self._current = None
        self._seek_to_first()

    def _advance(self):
        self._current = next(self._it, None)
        self.valid = self._current is not None

    def _seek_to_first(self):
        self._it.seek_to_start()
        self._advance()

    def _next(self):
        self._advance()

    def _key(self):
        return self._current[0]

    def _value(self):
        return self._current[1]

    def _seek(self, key):
        self._it.seek(key)
        self._advance()
        if self.valid and self._current[0] == key:
            return True
        self._seek_to_first()
        return False

    def _close(self):
        self._it.close()
        self._it = None


class LevelDBTransaction(Transaction):
    def __init__(self, db):
        super().__init__()
        self._db = db

    def commit(self):
        with self._db.handle.write_batch() as batch:
            for k, v in self._pending:
                batch.put(k, v)
        self._pending = []


@DB_BACKENDS.register("leveldb")
class LevelDB(DB):
    """LevelDB through the optional ``plyvel`` package."""

    name = "leveldb"

    def __init__(self, source, mode=READ):
        super().__init__(source, mode)
        _check_source(self.source, mode, "leveldb")  # a wrong path or backend needs no plyvel
        plyvel = _import_plyvel()
        options = dict(create_if_missing=mode != READ, error_if_exists=mode == NEW,
                       block_size=65536, write_buffer_size=64 << 20)
        try:
            self._key, self.handle = _acquire("leveldb", self.source,
                                              lambda: plyvel.DB(self.source, **options))
        except plyvel.Error as exc:
            raise DBError("cannot open LevelDB database '%s': %s" % (self.source, exc)) from None

    def _open_cursor(self):
        return LevelDBCursor(self.handle, self.source)

    def _closed_handle(self):
        return getattr(self, "handle", None) is None

    def transaction(self):
        if self.mode == READ:
            raise DBError("database '%s' is open for reading only" % self.source)
        return LevelDBTransaction(self)

    def close(self):
        if getattr(self, "handle", None) is not None:
            self._close_cursors()
            _release(self._key, lambda h: h.close())
            self.handle = None
