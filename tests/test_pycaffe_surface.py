"""pycaffe's smaller names that scripts use (BVLC's python/caffe/_caffe.cpp and pycaffe.py, e.g.
python/train.py): ``caffe.Timer``, ``init_log`` / ``log``, ``has_nccl`` and the Net's
underscored ``_forward`` / ``_backward`` / ``_batch``, against values worked out by hand."""

import logging

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import backend, profiling

# z = 3 * (2 * x), a loss of weight 1 on z: loss = sum(6 x), dloss/dy = 3, dloss/dx = 6
CHAIN = """
force_backward: true
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "double" type: "Power" bottom: "x" top: "y" power_param { scale: 2 } }
layer { name: "triple" type: "Power" bottom: "y" top: "z" power_param { scale: 3 }
        loss_weight: 1 }
"""


@pytest.fixture
def chain(tmp_path):
    path = tmp_path / "chain.prototxt"
    path.write_text(CHAIN)
    return caffe.Net(str(path), caffe.TRAIN)


def test_underscored_forward_runs_a_range_of_layer_indices_and_returns_the_loss(chain):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    chain.blobs["x"].data[...] = x
    chain.blobs["z"].data[...] = -1
    assert chain._forward(1, 1) == 0.0  # only "double": no loss, z untouched
    np.testing.assert_array_equal(chain.blobs["y"].data, 2 * x)
    np.testing.assert_array_equal(chain.blobs["z"].data, -1)
    assert chain._forward(0, 2) == pytest.approx(6 * x.sum())
    np.testing.assert_array_equal(chain.blobs["z"].data, 6 * x)


def test_underscored_backward_runs_a_range_from_its_start_down_to_its_end(chain):
    chain.blobs["x"].data[...] = 1
    chain._forward(0, 2)
    chain.blobs["x"].diff[...] = 7
    chain._backward(2, 2)  # "triple" only: z's diff (its loss weight, 1) times 3
    np.testing.assert_array_equal(chain.blobs["y"].diff, 3)
    np.testing.assert_array_equal(chain.blobs["x"].diff, 7)
    chain._backward(2, 1)
    np.testing.assert_array_equal(chain.blobs["x"].diff, 6)


def test_underscored_batch_pads_the_last_batch_with_zeros(chain):
    items = np.arange(5 * 3, dtype=np.float32).reshape(5, 3) + 1
    batches = list(chain._batch({"x": items}))
    assert len(batches) == 3  # the net's batch is 2
    np.testing.assert_array_equal(batches[1]["x"], items[2:4])
    np.testing.assert_array_equal(batches[2]["x"], [items[4], [0, 0, 0]])


def test_timer_measures_from_start_to_stop(monkeypatch):
    clock = iter([10.0, 10.25, 20.0, 20.5])
    monkeypatch.setattr(profiling.time, "perf_counter", lambda: next(clock))
    timer = caffe.Timer()
    assert timer.ms == 0.0  # never started
    timer.start()
    timer.start()  # already running: keeps its start
    timer.stop()
    assert timer.ms == pytest.approx(250.0)
    assert timer.ms == pytest.approx(250.0)  # stopped: reading does not move it
    timer.start()
    assert timer.ms == pytest.approx(500.0)  # a running timer is stopped by reading it
    assert timer.seconds == pytest.approx(0.5)


def test_init_log_sets_the_level_and_log_writes_at_info(caplog):
    logger = logging.getLogger("pycaffe_lite")
    old = logger.level
    try:
        caffe.init_log(1)
        assert not logger.isEnabledFor(logging.INFO) and logger.isEnabledFor(logging.WARNING)
        caffe.init_log()
        assert logger.isEnabledFor(logging.INFO)
        with caplog.at_level(logging.INFO, "pycaffe_lite"):
            caffe.log("Using devices [0]")
        assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
            ("pycaffe_lite", logging.INFO, "Using devices [0]")]
        with pytest.raises(caffe.CaffeError, match="level must be 0"):
            caffe.init_log(7)
    finally:
        logger.setLevel(old)


def test_has_nccl_is_false_without_a_usable_gpu():
    if backend.gpu_available():
        assert isinstance(caffe.has_nccl(), bool)
    else:
        assert caffe.has_nccl() is False
