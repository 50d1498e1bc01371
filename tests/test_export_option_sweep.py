"""Export options that onnxruntime or PyTorch ran otherwise than our forward, each on a
one-layer net (tests/helpers/export_sweep.py): the net exported at the exporter's lowest and
highest ONNX opsets and run by onnxruntime, and exported to PyTorch and run as a module,
equals our forward to 1e-5 of its largest magnitude; our forward itself checked by hand."""

import numpy as np
import pytest

from helpers import export_sweep as sweep
from helpers.export_sweep import Case
from helpers.onnx_runtime import net_from_text

torch = pytest.importorskip("torch", reason="torch is a test dependency (marker: torch)")
pytestmark = pytest.mark.torch


# ---- what the sweep found, one test each -----------------------------------------------

def assert_every_engine_agrees(case, seed=0):
    result = sweep.run_case(case, seed, sweep.engines(sweep.OPSETS))
    assert result is not None, "our Net refuses %r" % case
    assert set(result.values()) == {"ok"}, result


def test_pytorch_slice_with_one_top_is_its_bottom():
    """A Slice with one top (no slice_point) is a copy in Caffe; the module's layer returned
    torch.split's one-element tuple as the blob."""
    case = Case("Slice", "slice_param { axis: -3 }", {"data": (2, 2, 3)})
    net = net_from_text(case.text)
    x = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    np.testing.assert_array_equal(net.forward(data=x)["out"], x)  # by hand: a copy
    assert_every_engine_agrees(case)
    assert_every_engine_agrees(Case("Slice", "", {"data": (3, 1, 4, 2)}))


def test_pytorch_argmax_of_a_vector_without_axis():
    """ArgMax without axis ranks each item's values flattened: an (N,) bottom has one value
    per item, its index 0 (BVLC: the top is (N, 1, top_k)); the module flattened from axis
    1, which a vector lacks."""
    case = Case("ArgMax", "argmax_param { out_max_val: true }", {"data": (5,)})
    net = net_from_text(case.text)
    x = np.array([3, -1, 2, 0.5, 7], np.float32)
    out = net.forward(data=x)["out"]
    assert out.shape == (5, 2, 1)
    np.testing.assert_array_equal(out[:, 0, 0], 0)  # by hand
    np.testing.assert_array_equal(out[:, 1, 0], x)
    assert_every_engine_agrees(case)
    assert_every_engine_agrees(Case("ArgMax", "", {"data": (4,)}))


def test_pytorch_batch_norm_of_a_vector():
    """BVLC's BatchNorm takes a 1-axis bottom as one channel; the module broadcast its
    (1, C) statistics over it and gave a (1, N) top."""
    case = Case("BatchNorm", "batch_norm_param { eps: 0.1 }", {"data": (4,)})
    net = net_from_text(case.text)
    net.params["layer"][0].data[...] = 0.5
    net.params["layer"][1].data[...] = 2.0
    net.params["layer"][2].data[...] = 0.5
    x = np.array([1, -2, 3, 0], np.float32)
    np.testing.assert_allclose(net.forward(data=x)["out"], (x - 1.0) / np.sqrt(4.0 + 0.1),
                               rtol=1e-6)  # by hand: mean 0.5 / 0.5, variance 2 / 0.5
    assert_every_engine_agrees(case)
    for params in ("batch_norm_param { use_global_stats: false }",
                   "batch_norm_param { scale_bias: true }"):
        assert_every_engine_agrees(Case("BatchNorm", params, {"data": (5,)}))


def test_stochastic_pooling_where_a_window_sums_to_zero_or_less():
    """Caffe's test-time STOCHASTIC pooling is sum(v^2) / sum(v) where the sum is positive,
    else 0 (a window of a ReLU's zeros); ONNX divided 0 by 0 (NaN) and both engines divided
    a negative sum."""
    case = Case("Pooling", "pooling_param { pool: STOCHASTIC kernel_size: 2 stride: 2 }",
                {"data": (1, 1, 2, 6)},
                feeds={"data": np.array([[0, 0, 1, 0, -1, 0.5], [0, 0, 2, 3, 0, 0]])})
    net = net_from_text(case.text)
    out = net.forward(data=case.feeds["data"].reshape(1, 1, 2, 6).astype(np.float32))["out"]
    np.testing.assert_allclose(out.ravel(), [0, (1 + 4 + 9) / 6, 0], rtol=1e-6)  # by hand
    assert_every_engine_agrees(case)


def test_global_stochastic_pooling():
    """Global STOCHASTIC pooling is the same sum(v^2) / sum(v) over the whole plane; both
    exporters refused it."""
    x = np.array([[[[1, 2, 0], [0, 3, 0]], [[-1, 0, 0], [0, 0, 0.5]]]], np.float32)
    case = Case("Pooling", "pooling_param { pool: STOCHASTIC global_pooling: true }",
                {"data": (1, 2, 2, 3)}, feeds={"data": x})
    out = net_from_text(case.text).forward(data=x)["out"]
    np.testing.assert_allclose(out.ravel(), [14 / 6, 0], rtol=1e-6)  # by hand
    assert_every_engine_agrees(case)
