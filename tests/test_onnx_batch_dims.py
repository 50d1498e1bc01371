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


def test_every_swept_case_declares_what_onnxruntime_gives():
    """The option sweep's cases (10 per type): strict shape inference accepts each graph, and
    where the batch stays dynamic onnxruntime at the batch plus one gives outputs of the
    declared dims (numbers equal, N the new batch)."""
    from helpers import export_sweep as sweep
    from helpers import export_sweep_common, export_sweep_layout  # noqa: F401
    from helpers.export_sweep_cases import GENERATORS
    from pycaffe_lite import onnx as caffe_onnx
    from pycaffe_lite.errors import CaffeError

    checked, wrong = 0, []
    for type_ in sorted(GENERATORS):
        for seed in range(10):
            case = GENERATORS[type_](np.random.default_rng([sum(map(ord, type_)), seed]))
            built = None if case is None else sweep.build(case, seed)
            if built is None:
                continue
            net, feeds, _ = built
            try:
                model, report = caffe_onnx.export(net, None)
            except CaffeError:
                continue
            onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
            if report["static_batch"] or not report["inputs"]:
                continue
            batch = feeds[report["inputs"][0]].shape[0] + 1
            more = {k: np.concatenate([v, v[:1]]) if v.ndim and len(v) == batch - 1 else v
                    for k, v in feeds.items()}
            got = run_ort(model, more)
            for value in model.graph.output:
                dims, shape = _declared(value), got[value.name].shape
                checked += 1
                if len(dims) != len(shape) or any(
                        d != s if isinstance(d, int) else d == "N" and s != batch
                        for d, s in zip(dims, shape)):
                    wrong.append("%r: %s declared %s, got %s" % (case, value.name, dims, shape))
    assert not wrong, wrong[:5]
    assert checked > 300


def test_a_learned_blob_along_the_batch_axis_makes_it_static():
    """Bias over axis 0 learns one value per item: at batch 4 our net refuses the (3,)
    bias, and onnxruntime's Add cannot broadcast it either; the graph declared N."""
    from pycaffe_lite import onnx as caffe_onnx

    net = net_from_text(input_layers({"data": (3,)}) + '\nlayer { name: "layer" type: "Bias" '
                        'bottom: "data" top: "o" bias_param { axis: 0 } }')
    net.layers[-1].blobs[0].data[...] = [1, 2, 3]
    model, report = caffe_onnx.export(net, None)
    assert _declared(model.graph.input[0]) == [3]
    assert _declared(model.graph.output[0]) == [3]
    assert report["static_batch"][0][1].startswith("does not reshape to batch 4")
    np.testing.assert_array_equal(run_ort(model, {"data": np.ones(3, np.float32)})["o"],
                                  [2, 3, 4])
