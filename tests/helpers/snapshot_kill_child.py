"""Helper of test_snapshot_kill.py: a process that forks training runs on request.

Each line on stdin, ``FOLDER SLOW``, forks a child that trains the solver ``FOLDER/solver.prototxt``
(``solve()``, as ``pycaffe-lite train`` does) and prints ``pid N``; when the child ends (or is
killed) it prints ``exit CODE``. Forking from this process, which has Python, NumPy and
pycaffe-lite loaded already, makes a run start in milliseconds, so that a test can kill many.

With SLOW = 1 the child's snapshot files are written in 4 KiB chunks with a pause after each
(the real write path, :func:`pycaffe_lite.proto.protoio.atomic_write`, through a slow file), so
that a SIGKILL can be aimed at a given point inside a write.
"""

import logging
import os
import sys
import time
import traceback

from pycaffe_lite import layers
from pycaffe_lite.proto import protoio
from pycaffe_lite.solvers import get_solver

CHUNK = 4096
PAUSE = 0.001


class SlowFile:
    def __init__(self, f):
        self._f = f

    def write(self, data):
        view = memoryview(data)
        for start in range(0, len(view), CHUNK):
            self._f.write(view[start:start + CHUNK])
            self._f.flush()
            time.sleep(PAUSE)
        return len(view)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)


def slow_open(path, mode="r", *args, **kwargs):
    f = open(path, mode, *args, **kwargs)
    return SlowFile(f) if "w" in mode else f


def train(folder, slow):
    os.chdir(folder)
    if slow:
        protoio.open = slow_open
    get_solver("solver.prototxt").solve()


def main():
    logging.basicConfig(level=logging.ERROR)
    layers.load_all()
    for line in sys.stdin:
        folder, slow = line.split()
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                train(folder, slow == "1")
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            os._exit(code)
        print("pid", pid, flush=True)
        _, status = os.waitpid(pid, 0)
        print("exit", os.waitstatus_to_exitcode(status), flush=True)


if __name__ == "__main__":
    main()
