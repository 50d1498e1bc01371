"""Training across machines, the machines being network namespaces (tests/helpers/netns_hosts.py):
the traffic crosses the emulated links; N ranks over 2 hosts reach one process's weights with
batch N x B; rank 0 alone logs and snapshots; resume across hosts; a cut link or a frozen host
ends the job with an error naming the rank and host that stopped answering; a slow link still
trains, only slower."""

import os
import re
import signal
import sys
import time

import pytest

from helpers.mpi import (GUARD_S, make_lmdb, max_relative_difference, read_weights, run_single,
                         tiny_project)
from helpers.netns_hosts import Hosts, unavailable_reason

_reason = unavailable_reason()
# every test here runs real mpiexec jobs across network namespaces: the slow tier
pytestmark = [pytest.mark.mpi, pytest.mark.slow,
              pytest.mark.skipif(_reason is not None, reason=_reason or "")]

#: an allreduce of MIB MiB of ones over every rank; prints "RESULT seconds sum" on rank 0
ALLREDUCE = """
import sys, time
import numpy as np
from mpi4py import MPI
comm = MPI.COMM_WORLD
buf = np.ones(int(sys.argv[1]) << 18, np.float32)
comm.Barrier()
t0 = time.perf_counter()
comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
seconds = time.perf_counter() - t0
if comm.rank == 0:
    print("RESULT %.6f %g %g" % (seconds, buf.min(), buf.max()), flush=True)
"""


@pytest.fixture
def hosts():
    made = Hosts(2)
    try:
        yield made
    finally:
        made.close()


def _allreduce(hosts, mib, tmp_path):
    rc, out = hosts.run(1, [sys.executable, "-c", ALLREDUCE, str(mib)], tmp_path)
    assert rc == 0, out
    seconds, low, high = re.search(r"RESULT (\S+) (\S+) (\S+)", out).groups()
    assert float(low) == float(high) == hosts.n  # the sum over one rank per host
    return float(seconds)


def _assert_link_carried(hosts, before, volume):
    """Every host's link carried at least the buffer each way (its share must leave the host,
    the others' sum must reach it: any algorithm moves that much), and not wildly more than
    the ring's 2(N-1)/N of it (MPICH's reduce-scatter + allgather moves that, plus TCP/IP
    headers and MPI's own messages)."""
    ring = 2.0 * (hosts.n - 1) / hosts.n * volume
    for i in range(hosts.n):
        sent, received = (a - b for a, b in zip(hosts.counters(i), before[i]))
        assert volume <= sent <= 2.5 * ring, (i, sent, ring)
        assert volume <= received <= 2.5 * ring, (i, received, ring)


def test_the_allreduce_crosses_the_link_and_a_tbf_rate_slows_it(hosts, tmp_path):
    mib = 16
    volume = mib << 20
    before = [hosts.counters(i) for i in range(2)]
    _allreduce(hosts, mib, tmp_path)
    _assert_link_carried(hosts, before, volume)
    rate = 40e6  # bits per second
    hosts.set_rate(1, "40mbit")
    seconds = _allreduce(hosts, mib, tmp_path)
    # physics: the buffer must cross the link at the rate (half of that time: a generous
    # margin for tbf's burst and the timer's resolution)
    assert seconds >= 0.5 * volume * 8 / rate, seconds


def test_an_allreduce_over_4_hosts_crosses_every_link(tmp_path):
    hosts = Hosts(4)
    try:
        before = [hosts.counters(i) for i in range(4)]
        _allreduce(hosts, 4, tmp_path)
        _assert_link_carried(hosts, before, 4 << 20)
    finally:
        hosts.close()


# ---- training over 2 hosts ------------------------------------------------------------------
@pytest.fixture
def tiny(tmp_path):
    return make_lmdb(tmp_path / "db", n=24)


def _train_on(hosts, per_host, solver, cwd, *extra):
    job = hosts.job(per_host, ["train", "--solver", str(solver)] + list(extra), cwd)
    try:
        rc, out = job.finish(timeout=GUARD_S)
    finally:
        job.kill()
    assert rc == 0, out
    return out


def test_2_ranks_per_host_match_one_process_with_the_whole_batch_and_resume(hosts, tmp_path,
                                                                             tiny):
    """4 ranks x batch 2 over 2 hosts == 1 process x batch 8; rank 0 alone logs and
    snapshots; a resume from iteration 6 on the hosts continues the uninterrupted run."""
    ranks = tiny_project(tmp_path / "ranks", tiny, batch=2, max_iter=12, snapshot=6,
                         display=3)
    before = hosts.counters(1)
    out = _train_on(hosts, 2, ranks, tmp_path)
    sent, _ = (a - b for a, b in zip(hosts.counters(1), before))
    where = dict((int(r), (int(p), h)) for r, p, h in
                 re.findall(r"rank (\d) = pid (\d+) on (\w+)", out))
    assert {r: h for r, (p, h) in where.items()} == {0: "h1", 1: "h1", 2: "h2", 3: "h2"}
    assert "Data-parallel training on 4 processes" in out
    info = [line for line in out.splitlines() if re.match(r"I\d{4} ", line)]
    assert any("Iteration 6, loss = " in line for line in info)
    assert all(" %d " % where[0][0] in line[:40] for line in info)  # all rank 0's
    # every iteration the other host's partial sum of the 492 bytes of gradients crossed
    assert sent > 12 * 4 * (16 * 6 + 6 + 6 * 3 + 3)
    one = tiny_project(tmp_path / "one", tiny, batch=8, max_iter=12, snapshot=6, display=3)
    rc, single = run_single(["train", "--solver", str(one)], tmp_path)
    assert rc == 0, single
    got = read_weights(tmp_path / "ranks" / "snaps" / "solver_iter_12.caffemodel")
    want = read_weights(tmp_path / "one" / "snaps" / "solver_iter_12.caffemodel")
    assert max_relative_difference(got, want) <= 1e-4
    assert sorted(os.listdir(tmp_path / "ranks" / "snaps")) == [
        "solver_iter_12.caffemodel", "solver_iter_12.solverstate",
        "solver_iter_6.caffemodel", "solver_iter_6.solverstate"]
    # resume on the hosts from iteration 6 (a fresh folder: the run rewrites iteration 12)
    again = tiny_project(tmp_path / "again", tiny, batch=2, max_iter=12, snapshot=6, display=3)
    out = _train_on(hosts, 2, again, tmp_path, "--snapshot",
                    str(tmp_path / "ranks" / "snaps" / "solver_iter_6.solverstate"))
    assert "Iteration 9, loss = " in out and "Iteration 3, loss = " not in out  # from 6 on
    resumed = read_weights(tmp_path / "again" / "snaps" / "solver_iter_12.caffemodel")
    assert max_relative_difference(resumed, want) <= 1e-4


# ---- faults ---------------------------------------------------------------------------------
TIMEOUT_S = 4


def _endless(tmp_path, tiny):
    return tiny_project(tmp_path / "p", tiny, max_iter=10 ** 7, snapshot=0, display=10)


def _start_endless(hosts, tmp_path, tiny):
    job = hosts.job(1, ["train", "--solver", str(_endless(tmp_path, tiny)),
                        "--collective_timeout", str(TIMEOUT_S)], tmp_path)
    ranks = job.wait_for("Ranks: ")
    pid = int(re.search(r"rank 1 = pid (\d+) on h2", ranks).group(1))
    job.wait_for("Iteration 20, loss")
    return job, pid


def _assert_named_timeout(rc, out, hosts):
    assert rc != 0, out
    line = [x for x in out.splitlines() if "collective timeout: rank 0 (h1" in x]
    assert line, out
    waited = float(re.search(r"waited ([\d.]+) s \(--collective_timeout %d\)" % TIMEOUT_S,
                             line[0]).group(1))
    assert waited >= TIMEOUT_S  # the timeout ended it, nothing earlier
    assert re.search(r"for an allreduce of \d+ bytes \(iteration \d+\)", line[0]) or \
        "agreement on stop and snapshot requests (iteration" in line[0], line[0]
    assert re.search(r"stopped answering: rank 1 \(h2, pid \d+\), not heard from for", line[0])
    # nothing of the job is left on either host (h2's rank timed out on its own side)
    for i in range(2):
        _wait_until(lambda: not hosts.pids(i), "the processes on h%d to end" % (i + 1))


def _wait_until(condition, what):
    deadline = time.monotonic() + GUARD_S  # a guard against a hang only
    while not condition():
        assert time.monotonic() < deadline, "waited %d s for %s" % (GUARD_S, what)
        time.sleep(0.2)


def test_a_cut_link_ends_the_job_naming_the_rank_and_host_behind_it(hosts, tmp_path, tiny):
    job, _ = _start_endless(hosts, tmp_path, tiny)
    try:
        hosts.cut(1)
        rc, out = job.finish(timeout=GUARD_S)  # the guard: a hang fails here
    finally:
        job.kill()
    _assert_named_timeout(rc, out, hosts)


def test_a_frozen_host_ends_the_job_naming_its_rank(hosts, tmp_path, tiny):
    """Every process of h2 (its rank and hydra's proxy) stopped: the job ends with rank 1
    named; once h2 wakes, what is left there ends too."""
    job, pid = _start_endless(hosts, tmp_path, tiny)
    frozen = hosts.pids(1)
    try:
        assert pid in frozen
        for p in frozen:
            os.kill(p, signal.SIGSTOP)
        rc, out = job.finish(timeout=GUARD_S)  # the guard: a hang fails here
    finally:
        for p in frozen:
            try:
                os.kill(p, signal.SIGCONT)
            except ProcessLookupError:
                pass
        job.kill()
    _assert_named_timeout(rc, out, hosts)


WIDE = ('layer { name: "wide" type: "InnerProduct" bottom: "ip1" top: "wide" '
        'inner_product_param { num_output: 4000 weight_filler { type: "gaussian" std: 0.05 } '
        '} }')


def test_a_slow_link_still_trains_only_slower(tmp_path, tiny):
    """A link of 8 Mbit/s: 160 KB of gradients cross it every iteration; the job finishes
    with the weights of one process with the whole batch, in at least the time that the
    volume takes at that rate (half of it: a generous margin)."""
    hosts = Hosts(2, rate="8mbit")
    try:
        solver = tiny_project(tmp_path / "slow", tiny, batch=2, max_iter=10, snapshot=10,
                              extra_layers=WIDE, ip2_bottom="wide")
        before = hosts.counters(1)
        t0 = time.monotonic()
        _train_on(hosts, 1, solver, tmp_path, "--collective_timeout", "60")
        seconds = time.monotonic() - t0
        sent = hosts.counters(1)[0] - before[0]
    finally:
        hosts.close()
    one = tiny_project(tmp_path / "one", tiny, batch=4, max_iter=10, snapshot=10,
                       extra_layers=WIDE, ip2_bottom="wide")
    rc, out = run_single(["train", "--solver", str(one)], tmp_path)
    assert rc == 0, out
    got = read_weights(tmp_path / "slow" / "snaps" / "solver_iter_10.caffemodel")
    want = read_weights(tmp_path / "one" / "snaps" / "solver_iter_10.caffemodel")
    assert max_relative_difference(got, want) <= 1e-4
    gradients = 4 * (6 * 4000 + 4000 + 4000 * 3 + 16 * 6 + 6)
    assert sent >= 10 * gradients  # every iteration's gradients crossed the link
    assert seconds >= 0.5 * 10 * gradients * 8 / 8e6
