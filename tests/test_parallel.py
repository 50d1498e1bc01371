"""Data-parallel training, in one process: solver count and rank, the Data layer's record rule,
the gradient buckets and when they are reduced, the command line's launcher checks."""

import sys

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import cli, parallel
from pycaffe_lite.commands import train as train_cmd
from pycaffe_lite.errors import CaffeError
from pycaffe_lite import ranks
from pycaffe_lite.parallel import launch
from pycaffe_lite.solvers import SGDSolver

from helpers.mpi import make_lmdb, read_weights, tiny_project


@pytest.fixture(autouse=True)
def single_solver():
    ranks.reset()
    yield
    ranks.reset()


def test_pycaffe_names_set_and_read_the_solver_rank():
    caffe.set_solver_count(3)
    caffe.set_solver_rank(2)
    caffe.set_multiprocess(True)
    assert (caffe.solver_count(), caffe.solver_rank(), parallel.multiprocess()) == (3, 2, True)
    assert not parallel.root_solver()
    with pytest.raises(CaffeError, match=r"rank must be in 0 \.\. 2"):
        caffe.set_solver_rank(3)
    with pytest.raises(CaffeError, match="rank is 2"):
        caffe.set_solver_count(2)


def _labels_and_positions(source, count, rank, batch, phase, batches):
    ranks.reset()
    ranks.set_solver_count(count)
    ranks.set_solver_rank(rank)
    proto = """layer { name: "d" type: "Data" top: "x" top: "y"
                data_param { source: "%s" batch_size: %d backend: LMDB prefetch: 0 } }""" \
        % (source, batch)
    net = caffe.Net(_write(proto, source), phase)
    seen = []
    for _ in range(batches):
        net.forward()
        seen.append(net.blobs["x"].data[:, 0, 0, 0].copy())
    state = net.layers[0].get_state()
    net.layers[0].close()
    return np.concatenate(seen), state


def _write(text, source):
    path = str(source) + ".prototxt"
    with open(path, "w") as f:
        f.write(text)
    return path


def test_train_records_go_to_rank_i_mod_n_as_caffe_skips_them(tmp_path):
    source = make_lmdb(tmp_path / "db", n=10, shape=(1, 1, 1))
    one, _ = _labels_and_positions(source, 1, 0, 12, caffe.TRAIN, 2)  # 24 records: wraps
    for count in (2, 3):
        for rank in range(count):
            mine, state = _labels_and_positions(source, count, rank, 4, caffe.TRAIN, 2)
            # batch t of rank r holds records t*N*B + r + N*j of the one-process stream
            expected = [one[t * count * 4 + rank + count * j] for t in range(2) for j in range(4)]
            np.testing.assert_array_equal(mine, expected)
            # the stored position is the global one: the same on every rank
            assert state["position"] == (2 * count * 4) % 10
    # TEST: the root solver reads every record whatever the rank
    test_one, _ = _labels_and_positions(source, 1, 0, 4, caffe.TEST, 2)
    test_rank1, _ = _labels_and_positions(source, 3, 1, 4, caffe.TEST, 2)
    np.testing.assert_array_equal(test_one, test_rank1)


class RecordingComm:
    """A one-rank stand-in that records each collective and where the backward pass was."""

    rank, on_device, name = 0, False, "recording"

    def __init__(self, size):
        self.size = size
        self.calls = []
        self.layer = None

    def start_allreduce(self, buf):
        self.calls.append(("allreduce", self.layer, buf.size, buf.base is not None))
        buf *= self.size  # as if every rank had the same gradients: the mean is unchanged

        class Handle:
            def test(self):
                return True

            def wait(self):
                pass
        return Handle()

    def bcast(self, buf, root=0):
        self.calls.append(("bcast", None, buf.size, True))

    def agree(self, code):
        return code


def _tiny_solver(tmp_path, **kw):
    source = make_lmdb(tmp_path / "db", n=12)
    return SGDSolver(str(tiny_project(tmp_path / "p", source, **kw)))


def test_one_collective_per_bucket_started_as_the_backward_pass_finishes_it(tmp_path):
    solver = _tiny_solver(tmp_path)
    comm = RecordingComm(2)
    # ip2 (3x6 + 3 values) in one bucket, ip1 (6x16 + 6) in another
    sync = parallel.DataParallel(solver, comm, bucket_bytes=4 * 110).attach()
    assert [len(b.params) for b in sync.buckets] == [2, 2]
    net = solver.net
    net.before_backward(lambda i: setattr(comm, "layer", i))
    reference = _tiny_solver(tmp_path / "ref")
    solver.step(3)
    reference.step(3)
    calls = [c for c in comm.calls if c[0] == "allreduce"]
    assert len(calls) == 3 * 2  # two buckets per iteration, never one per param
    ip1, ip2 = net.layer_names.index("ip1"), net.layer_names.index("ip2")
    # ip2's bucket starts right after ip2's backward, before ip1's backward has run
    assert calls[0][1] == ip2 and calls[1][1] == ip1
    assert [c[2] for c in calls[:2]] == [3 * 6 + 3, 6 * 16 + 6]
    # the reduced mean of identical gradients is the gradient: the same training
    got, want = solver.net.params, reference.net.params
    for name in want:
        for a, b in zip(got[name], want[name]):
            np.testing.assert_allclose(a.data, b.data, rtol=1e-6, atol=1e-7)


def test_without_layer_wise_reduce_every_bucket_waits_for_the_whole_backward(tmp_path):
    solver = _tiny_solver(tmp_path)
    comm = RecordingComm(2)
    parallel.DataParallel(solver, comm, bucket_bytes=4 * 110, layer_wise=False).attach()
    solver.net.before_backward(lambda i: setattr(comm, "layer", i))
    solver.step(1)
    calls = [c for c in comm.calls if c[0] == "allreduce"]
    assert [c[1] for c in calls] == [0, 0]  # after the last layer's backward (layer 0)


def test_iter_size_reduces_once_per_iteration(tmp_path):
    solver = _tiny_solver(tmp_path)
    solver.param.iter_size = 3
    comm = RecordingComm(2)
    parallel.DataParallel(solver, comm).attach()
    solver.step(2)
    assert len([c for c in comm.calls if c[0] == "allreduce"]) == 2


def test_shared_params_are_reduced_after_their_last_user(tmp_path):
    extra = """layer { name: "ipA" type: "InnerProduct" bottom: "ip1" top: "ipA"
                        param { name: "shared" } inner_product_param { num_output: 6
                        bias_term: false weight_filler { type: "gaussian" std: 0.3 } } }
               layer { name: "ipB" type: "InnerProduct" bottom: "ipA" top: "ipB"
                        param { name: "shared" } inner_product_param { num_output: 6
                        bias_term: false weight_filler { type: "gaussian" std: 0.3 } } }"""
    solver = _tiny_solver(tmp_path, extra_layers=extra, ip2_bottom="ipB")
    comm = RecordingComm(2)
    sync = parallel.DataParallel(solver, comm, bucket_bytes=4).attach()  # a param per bucket
    net = solver.net
    net.before_backward(lambda i: setattr(comm, "layer", i))
    solver.step(1)
    shared = [b for b in sync.buckets if b.params[0][2] == 36]
    assert len(shared) == 1 and shared[0].ready_layer == net.layer_names.index("ipA")
    starts = [c[1] for c in comm.calls if c[0] == "allreduce" and c[2] == 36]
    assert starts == [net.layer_names.index("ipA")]  # not at ipB, which runs first


def test_launcher_without_mpi4py_stops_with_the_extra_named(tmp_path, monkeypatch, capsys):
    solver = tiny_project(tmp_path / "p", make_lmdb(tmp_path / "db", n=12), max_iter=2)
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # "import mpi4py" raises ImportError
    monkeypatch.setenv("PMI_RANK", "1")
    monkeypatch.setenv("PMI_SIZE", "2")
    assert cli.main(["train", "--solver", str(solver)]) == 1
    err = capsys.readouterr().err
    assert "PMI_RANK=1" in err and "pip install mpi4py mpich" in err and "independent copy" in err
    assert not list((tmp_path / "p" / "snaps").iterdir())  # nothing trained, nothing written


def test_gpu_lists_start_one_process_per_gpu_under_mpiexec(monkeypatch):
    monkeypatch.setattr(launch, "find_mpiexec", lambda: "/venv/bin/mpiexec")
    args = cli.build_parser().parse_args(["train", "--solver", "s.prototxt", "--gpu", "0,1,2"])
    command = launch.relaunch_command(3, train_cmd.relaunch_argv(args))
    assert command[:3] == ["/venv/bin/mpiexec", "-n", "3"]
    assert command[3:6] == [sys.executable, "-m", "pycaffe_lite.cli"]
    assert command[6:] == ["train", "--solver", "s.prototxt", "--gpu", "0,1,2", "--level", "0",
                           "--sigint_effect", "stop", "--sighup_effect", "snapshot",
                           "--collective_timeout", "1800", "--cuda_graph", "on"]
    assert train_cmd.parse_gpus("0,1,2") == [0, 1, 2]


def test_the_ranks_of_a_gpu_list_get_every_train_flag_given(monkeypatch):
    """--gpu 0,1 starts the ranks with the command's own flags: each rank's parsed flags equal
    the ones given to the launcher, --plugin modules included (without them the ranks could
    not build a net with the plugin's layer types)."""
    monkeypatch.setattr(launch, "find_mpiexec", lambda: "/venv/bin/mpiexec")
    parser = cli.build_parser()
    given = ["train", "--solver", "s.prototxt", "--gpu", "0,1", "--weights", "a.caffemodel",
             "--level", "2", "--stage", "x,y", "--sigint_effect", "snapshot",
             "--sighup_effect", "none", "--tensorboard", "runs", "--tensorboard_histograms",
             "5", "--plugin", "my_layers", "--plugin", "more_layers", "--no_python_layers",
             "--cuda_graph", "off", "--collective_timeout", "60"]
    args = parser.parse_args(given)
    command = launch.relaunch_command(2, train_cmd.relaunch_argv(args))
    rank_args = parser.parse_args(command[6:])
    assert rank_args.plugin == ["my_layers", "more_layers"]
    assert vars(rank_args) == vars(args)


def test_rank_r_takes_the_r_th_listed_gpu(monkeypatch):
    chosen = []
    monkeypatch.setattr(caffe.backend, "set_device", chosen.append)
    monkeypatch.setattr(caffe.backend, "set_mode_gpu", lambda: None)
    ranks.set_solver_count(4)
    for rank in range(4):
        ranks.set_solver_rank(rank)
        train_cmd.select_mode("2,5", 0)
    assert chosen == [2, 5, 2, 5]


def test_rank_0_alone_writes_snapshots(tmp_path):
    solver = _tiny_solver(tmp_path)
    ranks.set_solver_count(2)
    ranks.set_solver_rank(1)
    assert solver.snapshot() is None
    assert not list((tmp_path / "p" / "snaps").iterdir())
    ranks.set_solver_rank(0)
    written = solver.snapshot()
    assert read_weights(written).keys() == {"ip1", "ip2"}


class _OneRank:
    """A communicator of one rank (what NCCL on one GPU or an MPI job of one process is)."""
    size, on_device, name = 1, False, "one rank"


def test_one_rank_data_parallel_trains_as_without_it(tmp_path):
    # one rank reduces nothing: the gradients must stay the solver's own (they were once
    # overwritten by the empty reduction buffer)
    from pycaffe_lite.parallel.reducer import DataParallel
    source = make_lmdb(tmp_path / "db", n=12)
    solvers = [SGDSolver(str(tiny_project(tmp_path / name, source))) for name in ("a", "b")]
    for layer_wise in (False, True):
        DataParallel(solvers[0], _OneRank(), layer_wise=layer_wise).attach()
        for s in solvers:
            s.step(2)
        for name, blobs in solvers[1].net.params.items():
            for got, want in zip(solvers[0].net.params[name], blobs):
                np.testing.assert_allclose(got.data, want.data, rtol=1e-6, atol=1e-7)
