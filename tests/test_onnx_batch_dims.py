"""The dims an exported graph declares for its outputs are true at another batch size: axis
0 is ``N`` only where it follows the batch; a layer that moves the batch (Permute) or folds
it into another axis (Flatten from axis 0, Concat on axis 0, Reshape) has its output axes
declared as numbers where they do not change, ``N`` where they are the batch, and a name of
their own where they grow with it. Checked with onnx's strict shape inference and with
onnxruntime at two other batch sizes."""

import numpy as np
import pytest

from helpers.onnx_runtime import fill_random, input_layers, net_from_text, run_ort

onnx = pytest.importorskip("onnx")

SHAPE = (2, 3, 4)
CASES = {
    "flatten_axis0": ('type: "Flatten" bottom: "data" flatten_param { axis: 0 }', [["o_0"]]),
    "flatten_axis1": ('type: "Flatten" bottom: "data"', [["N", 12]]),
    "permute_batch_last": ('type: "Permute" bottom: "data" permute_param { order: 2 order: 1 '
                           'order: 0 }', [[4, 3, "N"]]),
    "concat_axis0": ('type: "Concat" bottom: "data" bottom: "data" concat_param { axis: 0 }',
                     [["o_0", 3, 4]]),
    "reshape_keep": ('type: "Reshape" bottom: "data" reshape_param { shape { dim: 0 dim: -1 '
                     '} }', [["N", 12]]),
}


def _export(body):
    from pycaffe_lite import onnx as caffe_onnx

    net = net_from_text(input_layers({"data": SHAPE}) +
                        '\nlayer { name: "layer" %s top: "o" }' % body)
    fill_random(net)
    return net, caffe_onnx.export(net, None)


def _declared(value):
    return [d.dim_param if d.HasField("dim_param") else d.dim_value
            for d in value.type.tensor_type.shape.dim]


@pytest.mark.parametrize("name", sorted(CASES))
def test_declared_output_dims(name):
    body, expected = CASES[name]
    net, (model, report) = _export(body)
    assert report["static_batch"] == []
    assert [_declared(v) for v in model.graph.output] == expected
    assert _declared(model.graph.input[0]) == ["N", 3, 4]
    onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    for batch in (1, 5):
        x = np.random.default_rng(batch).normal(size=(batch,) + SHAPE[1:]).astype(np.float32)
        got = run_ort(model, {"data": x})["o"]
        sizes = {}
        for dim, size in zip(expected[0], got.shape):
            if dim == "N":
                assert size == batch, (got.shape, expected)
            elif isinstance(dim, int):
                assert size == dim, (got.shape, expected)
            else:
                assert sizes.setdefault(dim, size) == size
        # the values: our own net at that batch
        net.blobs["data"].reshape(x.shape)
        net.reshape()
        np.testing.assert_array_equal(got, net.forward(data=x)["o"])


def test_export_leaves_the_net_as_it_was():
    net, _ = _export(CASES["concat_axis0"][0])
    x = np.arange(24, dtype=np.float32).reshape(SHAPE)
    net.forward(data=x)
    before = np.array(net.blobs["o"].data, copy=True)
    from pycaffe_lite import onnx as caffe_onnx

    caffe_onnx.export(net, None)
    assert net.blobs["o"].shape == (4, 3, 4)
    np.testing.assert_array_equal(net.blobs["o"].data, before)
    np.testing.assert_array_equal(net.blobs["data"].data, x)


@pytest.mark.parametrize("dims", ["dim: 6 dim: 4", "dim: -1 dim: 4"])
def test_a_reshape_of_the_batch_axis_is_declared_static(dims):
    """A Reshape from the batch axis on holds the batch in its shape constant: the graph
    declares the net's numbers and reports it."""
    net, (model, report) = _export('type: "Reshape" bottom: "data" reshape_param { shape { '
                                   '%s } }' % dims)
    assert _declared(model.graph.input[0]) == [2, 3, 4]
    assert _declared(model.graph.output[0]) == [6, 4]
    assert report["static_batch"] == [("layer", "reshapes from the batch axis on")]


def test_a_net_that_refuses_another_batch_is_declared_static(monkeypatch):
    """Where our net cannot take batch 3, nothing says the graph can: its dims are the
    net's numbers and the report says why."""
    from pycaffe_lite.onnx import batch_dims

    net, _ = _export(CASES["flatten_axis0"][0])
    monkeypatch.setattr(batch_dims, "probe", lambda *a: (None, "refused"))
    from pycaffe_lite import onnx as caffe_onnx

    model, report = caffe_onnx.export(net, None)
    assert _declared(model.graph.input[0]) == [2, 3, 4]
    assert _declared(model.graph.output[0]) == [24]
    assert report["static_batch"] == [("net", "does not reshape to batch 3: refused")]
