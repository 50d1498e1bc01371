"""NVCaffe's ``test_and_snapshot_last_epochs``: which iterations test and write snapshots named
with the scores, worked out by hand from the fork's ``Solver::Step`` (src/caffe/solver.cpp):
``r = N - 1``; at the top of an iteration a test is due when ``epochs > 0`` and
``epochs_passed + r >= epochs`` (``epochs = iters * iter_size * batch / records``,
``epochs_passed = it * iter_size * batch / records``, both set at the end of each iteration,
so the pass count lags one iteration), or when ``epochs == 0``, it is the last iteration and
``r > 0``; each due test takes one off ``r``; after the iteration is counted, the weights are
written as ``<prefix>_iter_<iter>_score0_<s0>_score1_<s1>.caffemodel`` (SnapshotFilename:
C++'s stream format of a float, 6 significant digits)."""

import logging
import os

import lmdb
import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.solvers import get_solver

# 8 records, batch 2: an epoch is 4 iterations
RECORDS, BATCH = 8, 2

TRAIN = """
layer { name: "data" type: "Data" top: "data" top: "label"
        data_param { source: "%s" batch_size: %d backend: LMDB } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 1 weight_filler { type: "constant" value: 0.1 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "label" top: "loss" }
"""
MEMORY_TRAIN = """
layer { name: "data" type: "DummyData" top: "data" top: "label"
        dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 1 }
                           data_filler { type: "constant" value: 0.5 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 1 weight_filler { type: "constant" value: 0.1 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "label" top: "loss" }
"""
# the test net's outputs: two constants, the scores 0.25 and 3.5 (and 1/3, 6 digits)
TEST = """
layer { name: "scores" type: "DummyData" top: "a" top: "b"
        dummy_data_param { shape { dim: 1 } shape { dim: 1 }
                           data_filler { type: "constant" value: %s }
                           data_filler { type: "constant" value: 3.5 } } }
"""


def _lmdb(path):
    env = lmdb.open(str(path), map_size=1 << 22)
    with env.begin(write=True) as txn:
        for i in range(RECORDS):
            d = caffe_pb2.Datum(channels=3, height=1, width=1, float_data=[i, 1.0, -i],
                                label=i % 2)
            txn.put(b"%05d" % i, d.SerializeToString())
    env.close()
    return str(path)


def _solver(tmp_path, last, max_iter=12, train=None, first_score="0.25", iter_size=1):
    param = caffe_pb2.SolverParameter()
    text_format.Merge('base_lr: 0.01 lr_policy: "fixed" display: 0 max_iter: %d '
                      'test_iter: 1 test_interval: 1000 test_initialization: false '
                      'snapshot_after_train: false iter_size: %d snapshot_prefix: "%s" '
                      'test_and_snapshot_last_epochs: %d'
                      % (max_iter, iter_size, tmp_path / "snap", last), param)
    text_format.Merge(train or TRAIN % (_lmdb(tmp_path / "db"), BATCH), param.train_net_param)
    text_format.Merge(TEST % first_score, param.test_net_param.add())
    path = tmp_path / "solver.prototxt"
    path.write_text(text_format.MessageToString(param))
    return get_solver(str(path))


def _run(tmp_path, caplog, **kw):
    solver = _solver(tmp_path, **kw)
    with caplog.at_level(logging.INFO, logger="pycaffe_lite"):
        solver.solve()
    tested = [int(r.getMessage().split()[1].rstrip(","))
              for r in caplog.records if "Testing net (#0)" in r.getMessage()]
    written = sorted(f for f in os.listdir(tmp_path) if f.endswith(".caffemodel"))
    return tested, written


@pytest.mark.parametrize("last, tested, iters", [
    # 12 iterations = 3 epochs. N = 2: r = 1, due when (k - 1) / 4 + 1 >= 3: k = 9; then r = 0
    # would need (k - 1) / 4 >= 3: k = 13, past the end
    (2, [9], [10]),
    # N = 3: r = 2: (k - 1) / 4 + 2 >= 3 at k = 5, then r = 1 at k = 9
    (3, [5, 9], [6, 10]),
    # N = 5: r = 4 is due at once, but epochs is 0 until iteration 0 ends: k = 1 (r = 3), then
    # (k - 1) / 4 + 3 >= 3 at k = 2 (r = 2), k = 5 (r = 1), k = 9 (r = 0)
    (5, [1, 2, 5, 9], [2, 3, 6, 10]),
    # N = 1: r = 0 from the start: (k - 1) / 4 >= 3 never within 12 iterations
    (1, [], []),
])
def test_the_last_epochs_test_and_snapshot_with_their_scores(tmp_path, caplog, last, tested,
                                                             iters):
    # it was refused: a text file with test_and_snapshot_last_epochs stopped naming NVCaffe
    got, written = _run(tmp_path, caplog, last=last)
    assert got == tested
    assert written == sorted("snap_iter_%d_score0_0.25_score1_3.5.caffemodel" % i
                             for i in iters)
    for i in iters:  # the state beside it, unscored, names the scored weights
        state = caffe_pb2.SolverState()
        state.ParseFromString((tmp_path / ("snap_iter_%d.solverstate" % i)).read_bytes())
        assert state.iter == i
        assert state.learned_net.endswith("snap_iter_%d_score0_0.25_score1_3.5.caffemodel" % i)


def test_iter_size_counts_in_the_epochs(tmp_path, caplog):
    # iter_size 2: an epoch is 2 iterations; 6 iterations = 3 epochs. N = 2: r = 1, due when
    # (k - 1) / 2 + 1 >= 3: k = 5
    got, written = _run(tmp_path, caplog, last=2, max_iter=6, iter_size=2)
    assert got == [5]
    assert written == ["snap_iter_6_score0_0.25_score1_3.5.caffemodel"]


def test_without_an_epoch_count_only_the_last_iteration_tests(tmp_path, caplog):
    # no Data / ImageData layer: epochs stays 0, so N = 2 tests at the last iteration (11),
    # and N = 1, whose r is 0, never; a score of 1/3 written with 6 significant digits
    got, written = _run(tmp_path, caplog, last=2, train=MEMORY_TRAIN,
                        first_score=repr(float(np.float32(1.0 / 3.0))))
    assert got == [11]
    assert written == ["snap_iter_12_score0_0.333333_score1_3.5.caffemodel"]
    for f in os.listdir(tmp_path):
        os.remove(tmp_path / f)
    caplog.clear()
    got, written = _run(tmp_path, caplog, last=1, train=MEMORY_TRAIN)
    assert got == [] and written == []
