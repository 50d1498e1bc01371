"""``pycaffe-lite train --collective_timeout`` on one machine (loopback; the multi-host faults
are in tests/test_multi_host.py): a frozen rank ends the job with its rank named, and the
flag's bad values are refused. The same timeout over NCCL's waits, with CuPy's NCCL replaced
by fakes whose collectives never complete (tests/helpers/fake_nccl.py)."""

import os
import re
import signal
import socket
import sys

import pytest

from helpers.mpi import (GUARD_S, Job, make_lmdb, mpi_available, mpiexec, rank1_layer,
                         run_single, tiny_project)

HELPERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers")

pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(not mpi_available(),
                                 reason="needs mpi4py and mpiexec (pip install '.[mpi]')")]


@pytest.mark.slow  # a real mpiexec job
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


@pytest.mark.slow  # a real mpiexec job
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


@pytest.mark.slow  # a real mpiexec job
@pytest.mark.parametrize("way", ["nccl", "mpi"])
def test_an_nccl_wait_that_never_ends_stops_nccl_and_the_job_naming_the_frozen_rank(tmp_path,
                                                                                     way):
    """The timeout set on the NCCL communicator ``parallel.init(nccl=True)`` gives, or on the
    MPIComm given to ``parallel.init`` (as the train command does): rank 1 freezes, rank 0's
    NCCL allreduce never completes; rank 0 names the allreduce and rank 1, aborts NCCL
    (ncclCommAbort) and ends the job through MPI_Abort."""
    rc, out, pid, ready = _frozen_nccl_job(tmp_path, way)
    assert ready.rstrip().endswith(", NCCL")
    assert rc != 0, out
    line = [x for x in out.splitlines() if "collective timeout: rank 0" in x]
    assert len(line) == 1, out
    host = socket.gethostname()
    assert ("(--collective_timeout 3) for an NCCL allreduce of 4096 bytes (iteration 5), NCCL "
            "collective #1 of this rank; stopped answering: rank 1 (%s, pid %d), not heard "
            "from for" % (host, pid)) in line[0], out
    assert line[0].endswith("; aborting the job"), out
    assert "fake ncclCommAbort on rank 0" in out
    assert "the allreduce returned" not in out


@pytest.mark.slow  # a real mpiexec job
def test_a_rank_frozen_in_nccls_set_up_ends_the_job_naming_it(tmp_path):
    """ncclCommInitRank waits for every rank: rank 1 freezes in it, rank 0's MPI watchdog ends
    the job naming the set-up and rank 1."""
    rc, out, pid, _ = _frozen_nccl_job(tmp_path, "init")
    assert rc != 0, out
    line = [x for x in out.splitlines() if "collective timeout: rank 0" in x]
    assert len(line) == 1, out
    assert ("(--collective_timeout 3) for NCCL's set-up of 2 ranks (ncclCommInitRank), "
            "collective #") in line[0], out
    assert ("stopped answering: rank 1 (%s, pid %d), not heard from for"
            % (socket.gethostname(), pid)) in line[0], out
    assert "set-up returned" not in out


def _frozen_nccl_job(tmp_path, way):
    """Two ranks of tests/helpers/nccl_timeout_script.py (timeout 3 s) whose rank 1 freezes
    itself (``way``: where); ``(exit code, output, rank 1's pid, rank 1's ready line)`` once
    the job has ended (the guard: a hang fails), rank 1 woken again whatever happened."""
    script = os.path.join(HELPERS, "nccl_timeout_script.py")
    job = Job(2, None, tmp_path,
              command=[mpiexec(), "-n", "2", sys.executable, script, "3", way])
    pid = None
    try:
        ready = job.wait_for("rank 1: pid ")
        pid = int(re.search(r"rank 1: pid (\d+)", ready).group(1))
        rc, out = job.finish(timeout=GUARD_S)
    finally:
        if pid is not None:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        job.kill()
    return rc, out, pid, ready
