"""``pycaffe-lite train --collective_timeout`` on one machine (loopback; the multi-host faults
are in tests/test_multi_host.py): a frozen rank ends the job with its rank named, and the
flag's bad values are refused."""

import os
import re
import signal
import socket

import pytest

from helpers.mpi import (GUARD_S, Job, make_lmdb, mpi_available, rank1_layer, run_single,
                         tiny_project)

pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(not mpi_available(),
                                 reason="needs mpi4py and mpiexec (pip install '.[mpi]')")]


def test_a_frozen_rank_ends_the_job_naming_it(tmp_path):
    solver = tiny_project(tmp_path / "p", make_lmdb(tmp_path / "db", n=24), max_iter=10 ** 7,
                          snapshot=0, display=10)
    job = Job(2, ["train", "--solver", str(solver), "--collective_timeout", "3"], tmp_path)
    try:
        ranks = job.wait_for("Ranks: ")
        pid = int(re.search(r"rank 1 = pid (\d+)", ranks).group(1))
        job.wait_for("Iteration 20, loss")
        os.kill(pid, signal.SIGSTOP)
        rc, out = job.finish(timeout=GUARD_S)  # the guard: a hang fails here
    finally:
        try:
            os.kill(pid, signal.SIGCONT)
        except (ProcessLookupError, NameError):
            pass
        job.kill()
    assert rc != 0
    line = [x for x in out.splitlines() if "collective timeout: rank 0" in x]
    assert line, out
    host = socket.gethostname()
    assert "(--collective_timeout 3)" in line[0]
    assert "stopped answering: rank 1 (%s, pid %d), not heard from for" % (host, pid) in line[0]


def test_a_rank_stuck_outside_the_collectives_is_told_from_a_dead_one(tmp_path):
    """Rank 1 stops in a forward pass, alive (its threads run), never to return: rank 0's
    timeout says that every rank still answers heartbeats (no rank is blamed as gone)."""
    extra, bottom, env = rank1_layer(
        tmp_path, 'print("rank 1 is stuck", flush=True); threading.Event().wait()')
    solver = tiny_project(tmp_path / "p", make_lmdb(tmp_path / "db", n=24), max_iter=10 ** 7,
                          snapshot=0, display=10, extra_layers=extra, ip2_bottom=bottom)
    job = Job(2, ["train", "--solver", str(solver), "--collective_timeout", "3"], tmp_path,
              env=env)
    try:
        job.wait_for("rank 1 is stuck")
        rc, out = job.finish(timeout=GUARD_S)
    finally:
        job.kill()
    assert rc != 0
    line = [x for x in out.splitlines() if "collective timeout: rank 0" in x]
    assert line, out
    assert "every rank still answers heartbeats" in line[0]
    assert "stopped answering" not in line[0]


@pytest.mark.parametrize("value", ["-1", "nan"])
def test_a_negative_timeout_is_refused(tmp_path, value):
    solver = tiny_project(tmp_path / "p", make_lmdb(tmp_path / "db", n=4), max_iter=1)
    rc, out = run_single(["train", "--solver", str(solver), "--collective_timeout", value],
                         tmp_path)
    assert rc == 1 and "--collective_timeout takes seconds >= 0" in out, out
    assert len(out.strip().splitlines()) == 1
