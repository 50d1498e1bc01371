"""Data-parallel training at its edges, with real mpiexec jobs: iter_size and clip_gradients,
a database with fewer records than ranks x batch, a resume under more ranks than wrote the
snapshot, rank 0's test pass, SIGTERM to one rank, bad flags. Each against an independent
reference: one process with batch N x B, or a single-process `test` of the same weights."""

import os
import re
import signal

import pytest

from helpers.mpi import (GUARD_S, Job, make_lmdb, max_relative_difference, mpi_available,
                         read_weights, run_ranks, run_single, tiny_project)

pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(not mpi_available(),
                                 reason="needs mpi4py and mpiexec (pip install '.[mpi]')")]


def _train(n, solver, cwd, *extra):
    args = ["train", "--solver", str(solver)] + list(extra)
    rc, out = run_ranks(n, args, cwd) if n > 1 else run_single(args, cwd)
    assert rc == 0, out
    return out


def _project(folder, db, batch, max_iter, extra="", **kw):
    solver = tiny_project(folder, db, batch=batch, max_iter=max_iter, snapshot=max_iter, **kw)
    solver.write_text(solver.read_text() + extra)
    return solver


def _weights(solver, it):
    return read_weights(solver.parent / "snaps" / ("solver_iter_%d.caffemodel" % it))


@pytest.mark.slow  # real mpiexec jobs
def test_iter_size_and_clip_gradients_on_2_ranks_match_one_process_with_the_whole_batch(
        tmp_path):
    """2 ranks x batch 2 x iter_size 2 (clipped) against 1 process x batch 4 x iter_size 2:
    the ranks average before the solver normalises by iter_size and clips the whole norm."""
    db = make_lmdb(tmp_path / "db", n=24)
    extra = "iter_size: 2\nclip_gradients: 0.05\n"
    one = _project(tmp_path / "one", db, 4, 6, extra)
    out = _train(1, one, tmp_path)
    assert "Gradient clipping: scaling down gradients" in out  # the clip is active
    ranks = _project(tmp_path / "ranks", db, 2, 6, extra)
    _train(2, ranks, tmp_path)
    got, want = _weights(ranks, 6), _weights(one, 6)
    assert max_relative_difference(got, want) <= 1e-5
    unclipped = _project(tmp_path / "unclipped", db, 4, 6, "iter_size: 2\n")
    _train(1, unclipped, tmp_path)
    assert max_relative_difference(_weights(unclipped, 6), want) > 1e-3  # the check can fail


@pytest.mark.slow  # real mpiexec jobs
def test_fewer_records_than_ranks_times_batch_wrap_around_as_one_process(tmp_path):
    """3 records, 3 ranks x batch 2: each iteration reads the database twice round, as one
    process with batch 6 does."""
    db = make_lmdb(tmp_path / "db", n=3)
    one = _project(tmp_path / "one", db, 6, 5)
    _train(1, one, tmp_path)
    ranks = _project(tmp_path / "ranks", db, 2, 5)
    _train(3, ranks, tmp_path)
    assert max_relative_difference(_weights(ranks, 5), _weights(one, 5)) <= 1e-5


@pytest.mark.slow  # real mpiexec jobs
def test_resume_2_to_3_ranks_continues_as_one_process_with_the_new_batch(tmp_path):
    """2 ranks x 2 for 6 iterations, then 3 ranks x 2 for 6 from the snapshot (Adam: its
    state carries over too) against one process with batch 4, then 6."""
    db = make_lmdb(tmp_path / "db", n=24)
    adam = 'type: "Adam"\nmomentum2: 0.999\n'
    first = _project(tmp_path / "r1", db, 2, 6, adam)
    _train(2, first, tmp_path)
    second = _project(tmp_path / "r2", db, 2, 12, adam)
    _train(3, second, tmp_path, "--snapshot",
           str(first.parent / "snaps" / "solver_iter_6.solverstate"))
    one = _project(tmp_path / "o1", db, 4, 6, adam)
    _train(1, one, tmp_path)
    two = _project(tmp_path / "o2", db, 6, 12, adam)
    _train(1, two, tmp_path, "--snapshot",
           str(one.parent / "snaps" / "solver_iter_6.solverstate"))
    want = _weights(two, 12)
    assert max_relative_difference(_weights(second, 12), want) <= 1e-5
    # a resume that restarted the data at record 0 would differ: one process, batch 6 from 0
    fresh = _project(tmp_path / "x", db, 6, 12, adam)
    _train(1, fresh, tmp_path, "--weights", str(one.parent / "snaps" / "solver_iter_6.caffemodel"))
    assert max_relative_difference(_weights(fresh, 12), want) > 1e-3


TEST_DATA = ('layer { name: "tdata" type: "Data" top: "data" top: "label" include { phase: '
             'TEST } data_param { source: "%s" batch_size: 3 backend: LMDB } }\n')
ACCURACY = ('layer { name: "acc" type: "Accuracy" bottom: "ip2" bottom: "label" top: "acc" '
            'include { phase: TEST } }\n')


@pytest.mark.slow  # real mpiexec jobs
def test_rank_0_tests_the_whole_test_set(tmp_path):
    """With 2 ranks, rank 0's test pass at the last iteration gives the accuracy and loss of
    a single-process `test` of the snapshot over the same 4 batches of 3 (every record)."""
    db = make_lmdb(tmp_path / "db", n=24)
    test_db = make_lmdb(tmp_path / "test_db", n=12, seed=5)
    solver = _project(tmp_path / "p", db, 2, 8, "test_interval: 8\ntest_iter: 4\n"
                      "test_initialization: false\n")
    net = solver.parent / "solver_net.prototxt"
    text = net.read_text().replace('layer { name: "ip1"', TEST_DATA % test_db +
                                   'layer { name: "ip1"', 1)
    net.write_text(text + ACCURACY)
    out = _train(2, solver, tmp_path)
    outputs = dict(re.findall(r"Test net output #\d: (\w+) = ([-\d.e]+)", out))
    assert sorted(outputs) == ["acc", "loss"], out
    rc, single = run_single(["test", "--model", str(net), "--weights",
                             str(solver.parent / "snaps" / "solver_iter_8.caffemodel"),
                             "--iterations", "4"], tmp_path)
    assert rc == 0, single
    final = dict(re.findall(r"test\.py:\d+\] (\w+) = ([-\d.e]+)", single))
    assert final == outputs, (final, outputs)


@pytest.mark.slow  # a real mpiexec job
@pytest.mark.parametrize("target", ["rank 1", "mpiexec"])
def test_sigterm_ends_the_job_with_whole_snapshots_and_no_process_left(tmp_path, target):
    """SIGTERM to rank 1 kills it (as it would kill one process): the launcher names its pid
    and ends rank 0 too; SIGTERM to mpiexec is forwarded to both ranks. Every snapshot
    written is a complete pair (atomic writes: no temporary file left), the newest resumes."""
    db = make_lmdb(tmp_path / "db", n=24)
    solver = tiny_project(tmp_path / "p", db, max_iter=10 ** 7, snapshot=3, display=10)
    job = Job(2, ["train", "--solver", str(solver)], tmp_path)
    pids = {}
    try:
        line = job.wait_for("Ranks: ")
        pids = dict((int(r), int(p)) for r, p in re.findall(r"rank (\d) = pid (\d+)", line))
        job.wait_for("Iteration 30, loss")
        os.kill(pids[1] if target == "rank 1" else job.proc.pid, signal.SIGTERM)
        rc, out = job.finish(timeout=GUARD_S)
    finally:
        job.kill()
    assert rc != 0, out
    if target == "rank 1":
        assert "PID %d" % pids[1] in out and "Terminated (signal 15)" in out, out
    assert "Optimization Done" not in out and "stopped early" not in out
    for pid in pids.values():  # the launcher has reaped both ranks
        assert not os.path.exists("/proc/%d" % pid), pid
    snaps = os.listdir(tmp_path / "p" / "snaps")
    assert not [name for name in snaps if name.startswith(".")], snaps
    its = sorted({int(re.search(r"_iter_(\d+)\.", n).group(1)) for n in snaps})
    assert its[-1] >= 30 and all(it % 3 == 0 for it in its)
    for it in its:
        assert {"solver_iter_%d.caffemodel" % it, "solver_iter_%d.solverstate" % it} <= set(snaps)
    resumed = tiny_project(tmp_path / "p", db, max_iter=its[-1] + 1, snapshot=0, display=1)
    out = _train(1, resumed, tmp_path, "--snapshot",
                 str(tmp_path / "p" / "snaps" / ("solver_iter_%d.solverstate" % its[-1])))
    assert "Iteration %d, loss" % (its[-1] + 1) in out, out


@pytest.mark.slow  # a real mpiexec job
def test_sighup_and_sigint_to_one_rank_are_agreed_on_by_every_rank(tmp_path):
    """SIGHUP to rank 1 alone: rank 0 writes one snapshot and training goes on; SIGINT to
    rank 1 alone: every rank stops, rank 0 writing the final snapshot, and the job ends
    with 0."""
    db = make_lmdb(tmp_path / "db", n=24)
    solver = tiny_project(tmp_path / "p", db, max_iter=10 ** 7, snapshot=0, display=10)
    job = Job(2, ["train", "--solver", str(solver)], tmp_path)
    try:
        line = job.wait_for("Ranks: ")
        rank1 = int(re.search(r"rank 1 = pid (\d+)", line).group(1))
        job.wait_for("Iteration 20, loss")
        os.kill(rank1, signal.SIGHUP)
        first = job.wait_for("Snapshotting solver state")
        job.wait_for("Iteration %d0, loss" % (int(re.search(r"_iter_(\d+)\.", first).group(1))
                                              // 10 + 2))
        os.kill(rank1, signal.SIGINT)
        job.wait_for("Optimization stopped early.")
        rc, out = job.finish(timeout=GUARD_S)
    finally:
        job.kill()
    assert rc == 0, out
    its = sorted({int(re.search(r"_iter_(\d+)\.", n).group(1))
                  for n in os.listdir(tmp_path / "p" / "snaps")})
    assert len(its) == 2 and its[0] >= 20 and its[1] > its[0] + 10, its
    assert len(os.listdir(tmp_path / "p" / "snaps")) == 4
    assert "Iteration %d, loss" % (its[1] + 1) not in out


def test_a_collective_timeout_that_is_not_a_number_is_refused_naming_the_flag(tmp_path):
    solver = tiny_project(tmp_path / "p", make_lmdb(tmp_path / "db", n=4), max_iter=1)
    rc, out = run_single(["train", "--solver", str(solver), "--collective_timeout", "abc"],
                         tmp_path)
    assert rc == 2 and "argument --collective_timeout: invalid float value: 'abc'" in out, out
    assert not os.listdir(tmp_path / "p" / "snaps")


@pytest.mark.slow  # a real mpiexec job
def test_gpu_all_under_mpiexec_without_a_gpu_is_an_error_on_every_rank(tmp_path):
    from pycaffe_lite import backend
    if backend.gpu_available():
        pytest.skip("GPUs present: tests/test_parallel_gpu.py trains on them")
    solver = tiny_project(tmp_path / "p", make_lmdb(tmp_path / "db", n=4), max_iter=2)
    rc, out = run_ranks(2, ["train", "--solver", str(solver), "--gpu", "all"], tmp_path)
    assert rc != 0
    assert re.search(r"rank [01] of 2 failed: GPUUnavailableError: ", out), out
    assert "Iteration 0" not in out and not os.listdir(tmp_path / "p" / "snaps")


@pytest.mark.slow  # a real mpiexec job
@pytest.mark.parametrize("kind", ["lmdb", "hdf5"])
def test_data_that_one_rank_cannot_open_ends_the_job_naming_rank_host_and_file(tmp_path, kind):
    """Rank 1's copy lacks its data (a database that is not there, an HDF5 list naming a
    file that is missing on its machine): the job ends with the rank, its host and the file."""
    import socket
    import subprocess
    import sys

    import h5py
    import numpy as np

    from helpers.mpi import _env, mpiexec
    db = make_lmdb(tmp_path / "db", n=8)
    good = tiny_project(tmp_path / "a", db, max_iter=4, snapshot=0)
    bad = tiny_project(tmp_path / "b", db, max_iter=4, snapshot=0)
    net = bad.parent / "solver_net.prototxt"
    if kind == "lmdb":
        missing = tmp_path / "elsewhere_lmdb"
        net.write_text(net.read_text().replace(str(db), str(missing)))
    else:
        with h5py.File(tmp_path / "d0.h5", "w") as f:
            f["data"] = np.zeros((4, 1, 4, 4), np.float32)
            f["label"] = np.zeros(4, np.float32)
        missing = tmp_path / "d1.h5"
        (tmp_path / "list.txt").write_text("%s\n%s\n" % (tmp_path / "d0.h5", missing))
        (tmp_path / "list_a.txt").write_text("%s\n%s\n" % (tmp_path / "d0.h5",
                                                         tmp_path / "d0.h5"))
        hdf5 = ('layer { name: "data" type: "HDF5Data" top: "data" top: "label" include '
                '{ phase: TRAIN } hdf5_data_param { source: "%s" batch_size: 2 } }')
        for folder, listed in ((good.parent, "list_a.txt"), (bad.parent, "list.txt")):
            path = folder / "solver_net.prototxt"
            text = re.sub(r'layer \{ name: "data" type: "Data".*?backend: LMDB \} \}',
                          hdf5 % (tmp_path / listed), path.read_text(), flags=re.S)
            assert "HDF5Data" in text
            path.write_text(text)
    command = [mpiexec()]
    for r, solver in enumerate((good, bad)):
        command += ([":"] if r else []) + ["-n", "1", sys.executable, "-m", "pycaffe_lite.cli",
                                           "train", "--solver", str(solver)]
    proc = subprocess.run(command, cwd=str(tmp_path), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=GUARD_S, env=_env({}))
    assert proc.returncode != 0, proc.stdout
    line = [x for x in proc.stdout.splitlines() if "[rank 1] rank 1 of 2 failed: " in x]
    assert line and str(missing) in line[0], proc.stdout
    assert " on host %s (pid " % socket.gethostname() in line[0], line[0]


def _hdf5_project(folder, files, batch, max_iter, snapshot):
    """tiny_project reading HDF5 files ``files`` (shuffled) in place of the LMDB."""
    folder.mkdir(parents=True, exist_ok=True)
    listing = folder / "list.txt"
    listing.write_text("".join("%s\n" % f for f in files))
    solver = tiny_project(folder, folder / "unused", batch=batch, max_iter=max_iter,
                          snapshot=snapshot)
    net = folder / "solver_net.prototxt"
    hdf5 = ('layer { name: "data" type: "HDF5Data" top: "data" top: "label" include { phase: '
            'TRAIN } hdf5_data_param { source: "%s" batch_size: %d shuffle: true } }'
            % (listing, batch))
    text = re.sub(r'layer \{ name: "data" type: "Data".*?backend: LMDB \} \}', hdf5,
                  net.read_text(), flags=re.S)
    assert "HDF5Data" in text
    net.write_text(text)
    return solver


@pytest.mark.slow  # real mpiexec jobs
def test_shuffled_hdf5_rows_are_shared_out_as_one_process_reads_them(tmp_path):
    """HDF5Data with shuffle: every rank shuffles the files and rows as rank 0 does, and rank r
    keeps rows r, r + N, ... of that one order: 2 ranks x 2 end, through reshuffles and a
    resume, at the weights of one process with batch 4. (With each rank's own shuffle some
    rows were read twice an epoch and others never.)"""
    import h5py
    import numpy as np
    rng = np.random.default_rng(0)
    files = []
    for i in range(2):
        files.append(tmp_path / ("d%d.h5" % i))
        with h5py.File(files[-1], "w") as f:
            f["data"] = rng.normal(size=(8, 1, 4, 4)).astype(np.float32)
            f["label"] = (np.arange(8) % 3).astype(np.float32)
    one = _hdf5_project(tmp_path / "one", files, 4, 12, 12)
    _train(1, one, tmp_path)
    ranks = _hdf5_project(tmp_path / "ranks", files, 2, 12, 6)
    _train(2, ranks, tmp_path)
    want = _weights(one, 12)
    assert max_relative_difference(_weights(ranks, 12), want) <= 1e-5
    _train(2, ranks, tmp_path, "--snapshot",
           str(ranks.parent / "snaps" / "solver_iter_6.solverstate"))
    assert max_relative_difference(_weights(ranks, 12), want) <= 1e-5


@pytest.mark.slow  # real mpiexec jobs
def test_a_random_skip_is_rank_0s_on_every_rank(tmp_path):
    """Data's rand_skip: every rank starts after the records rank 0 skipped (one process
    with the same seed skips as many), so the global stream stays one process's."""
    db = make_lmdb(tmp_path / "db", n=24)

    def project(folder, batch):
        solver = _project(folder, db, batch, 6)
        net = solver.parent / "solver_net.prototxt"
        net.write_text(net.read_text().replace("backend: LMDB", "backend: LMDB rand_skip: 20"))
        return solver
    one = project(tmp_path / "one", 4)
    out = _train(1, one, tmp_path)
    skipped = re.findall(r"skipping first (\d+) data points", out)
    assert len(skipped) == 1 and int(skipped[0]) > 0, out
    ranks = project(tmp_path / "ranks", 2)
    out = _train(2, ranks, tmp_path)
    assert re.findall(r"skipping first (\d+) data points", out) == skipped
    assert max_relative_difference(_weights(ranks, 6), _weights(one, 6)) <= 1e-5
