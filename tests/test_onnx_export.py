"""ONNX export, layer by layer: a one-layer net with random weights, exported and run by
onnxruntime, equals our forward to 1e-5 relative; every export passes
``onnx.checker.check_model(full_check=True)`` (inside ``export``)."""

import numpy as np
import pytest

from helpers.onnx_runtime import (assert_close, fill_random, input_layers, net_from_text, onnx,
                          run_ort)
from pycaffe_lite import onnx as caffe_onnx
from pycaffe_lite.errors import CaffeError

X4 = {"data": (2, 4, 7, 7)}


def one(type_, params="", shapes=None, bottoms=("data",), tops=("out",), name="layer"):
    shapes = shapes or X4
    text = input_layers(shapes) + '\nlayer { name: "%s" type: "%s" %s %s %s }' % (
        name, type_, " ".join('bottom: "%s"' % b for b in bottoms),
        " ".join('top: "%s"' % t for t in tops), params)
    return text, shapes


def pool(params, h=7, w=7):
    return one("Pooling", "pooling_param { %s }" % params, {"data": (2, 3, h, w)})


CASES = {
    "conv_group_dilation": one("Convolution", "convolution_param { num_output: 6 kernel_size: 3 "
                               "stride: 2 pad: 1 dilation: 2 group: 2 }"),
    "conv_hw_no_bias": one("Convolution", "convolution_param { num_output: 3 kernel_h: 3 "
                           "kernel_w: 1 pad_h: 1 pad_w: 0 stride_h: 1 stride_w: 2 "
                           "bias_term: false }"),
    "conv_3d": one("Convolution", "convolution_param { num_output: 3 kernel_size: 3 pad: 1 "
                   "stride: 2 }", {"data": (1, 2, 5, 6, 7)}),
    "deconv_group_dilation": one("Deconvolution", "convolution_param { num_output: 4 "
                                 "kernel_size: 3 stride: 2 pad: 1 dilation: 2 group: 2 }"),
    "inner_product": one("InnerProduct", "inner_product_param { num_output: 5 }"),
    "inner_product_axis2": one("InnerProduct", "inner_product_param { num_output: 5 axis: 2 }"),
    "inner_product_transpose": one("InnerProduct", "inner_product_param { num_output: 5 "
                                   "transpose: true bias_term: false }"),
    # 5 -> ceil((5 + 2 - 2) / 2) + 1 = 4 windows, the last starting in the padding: clipped to 3
    "max_pool_clipped_last_window": pool("pool: MAX kernel_size: 2 stride: 2 pad: 1", 5, 5),
    "ave_pool_clipped_last_window": pool("pool: AVE kernel_size: 2 stride: 2 pad: 1", 5, 5),
    # 6 + 2 pad: the last window runs past the padded input, its divisor counts 2 rows not 3
    "ave_pool_divisor_at_border": pool("pool: AVE kernel_size: 3 stride: 2 pad: 1", 6, 6),
    "max_pool_ceil_no_pad": pool("pool: MAX kernel_size: 3 stride: 2", 6, 8),
    "ave_pool_ceil_no_pad": pool("pool: AVE kernel_size: 3 stride: 2", 6, 8),
    "ave_pool_hw": pool("pool: AVE kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 1 pad_h: 1 "
                        "pad_w: 1", 8, 6),
    "max_pool_global": pool("pool: MAX global_pooling: true"),
    "ave_pool_global": pool("pool: AVE global_pooling: true"),
    "stochastic_pool_test": pool("pool: STOCHASTIC kernel_size: 3 stride: 2", 7, 6),
    "lrn_across": one("LRN", "lrn_param { local_size: 5 alpha: 0.5 beta: 0.75 k: 2 }"),
    "lrn_within": one("LRN", "lrn_param { local_size: 3 alpha: 0.7 beta: 0.6 "
                      "norm_region: WITHIN_CHANNEL }"),
    "batch_norm_global": one("BatchNorm", "batch_norm_param { use_global_stats: true "
                             "eps: 0.001 }"),
    "batch_norm_batch_stats": one("BatchNorm", "batch_norm_param { use_global_stats: false }"),
    "scale_bias": one("Scale", "scale_param { bias_term: true }"),
    "scale_axis0_two_bottoms": one("Scale", "scale_param { axis: 0 }",
                                   {"data": (2, 4, 3, 3), "s": (2, 4)}, ("data", "s")),
    "bias": one("Bias", "bias_param { axis: 1 num_axes: 2 }", {"data": (2, 3, 4, 5)}),
    "relu": one("ReLU"),
    "leaky_relu": one("ReLU", "relu_param { negative_slope: 0.1 }"),
    "prelu": one("PReLU"),
    "prelu_shared": one("PReLU", "prelu_param { channel_shared: true }"),
    "elu": one("ELU", "elu_param { alpha: 0.7 }"),
    "sigmoid": one("Sigmoid"),
    "tanh": one("TanH"),
    "absval": one("AbsVal"),
    "power": one("Power", "power_param { power: 2 scale: 0.5 shift: 2 }"),
    "exp": one("Exp", "exp_param { base: 2 scale: 0.5 shift: 0.3 }"),
    "exp_e": one("Exp"),
    "log": one("Log", "log_param { base: 10 scale: 0.5 shift: 2 }"),
    "log_e": one("Log", "log_param { shift: 1.5 }"),
    "bnll": one("BNLL"),
    "threshold": one("Threshold", "threshold_param { threshold: 0.2 }"),
    "clip": one("Clip", "clip_param { min: -0.3 max: 0.4 }"),
    "swish": one("Swish", "swish_param { beta: 1.5 }"),
    "relu6": one("ReLU6"),
    "mish": one("Mish"),
    "dropout": one("Dropout", "dropout_param { dropout_ratio: 0.3 }"),
    "softmax": one("Softmax"),
    "softmax_axis2": one("Softmax", "softmax_param { axis: 2 }"),
    "concat": one("Concat", "", {"a": (2, 3, 4, 4), "b": (2, 5, 4, 4)}, ("a", "b")),
    "concat_axis3": one("Concat", "concat_param { axis: 3 }", {"a": (2, 3, 4, 2),
                                                               "b": (2, 3, 4, 5)}, ("a", "b")),
    "slice": one("Slice", "slice_param { axis: 1 slice_point: 1 slice_point: 3 }", None,
                 ("data",), ("s1", "s2", "s3")),
    "slice_even": one("Slice", "slice_param { axis: 2 }", {"data": (2, 3, 8, 4)}, ("data",),
                      ("s1", "s2")),
    "split": one("Split", "", None, ("data",), ("a", "b")),
    "flatten": one("Flatten"),
    "flatten_range": one("Flatten", "flatten_param { axis: 1 end_axis: 2 }"),
    "reshape_zero_minus_one": one("Reshape", "reshape_param { shape { dim: 0 dim: -1 dim: 7 } }"),
    "reshape_axis_num_axes": one("Reshape", "reshape_param { shape { dim: 2 dim: 2 } axis: 1 "
                                 "num_axes: 1 }"),
    "reshape_axis_end": one("Reshape", "reshape_param { shape { dim: 7 dim: -1 } axis: -3 }"),
    "eltwise_prod": one("Eltwise", "eltwise_param { operation: PROD }",
                        {"a": (2, 3, 4), "b": (2, 3, 4), "c": (2, 3, 4)}, ("a", "b", "c")),
    "eltwise_sum_coeff": one("Eltwise", "eltwise_param { operation: SUM coeff: 0.5 "
                             "coeff: -2 }", {"a": (2, 3, 4), "b": (2, 3, 4)}, ("a", "b")),
    "eltwise_max": one("Eltwise", "eltwise_param { operation: MAX }",
                       {"a": (2, 3, 4), "b": (2, 3, 4)}, ("a", "b")),
    "crop": one("Crop", "crop_param { axis: 2 offset: 1 offset: 2 }",
                {"data": (2, 3, 8, 8), "ref": (2, 3, 5, 4)}, ("data", "ref")),
    "argmax_top3_values": one("ArgMax", "argmax_param { top_k: 3 out_max_val: true }"),
    "argmax_axis": one("ArgMax", "argmax_param { axis: 1 top_k: 2 }"),
    "argmax_axis_values": one("ArgMax", "argmax_param { axis: 2 out_max_val: true }"),
    "reduction_sum": one("Reduction", "reduction_param { axis: 1 }"),
    "reduction_asum": one("Reduction", "reduction_param { operation: ASUM axis: 2 coeff: 0.5 }"),
    "reduction_sumsq_all": one("Reduction", "reduction_param { operation: SUMSQ }"),
    "reduction_mean": one("Reduction", "reduction_param { operation: MEAN axis: -1 coeff: 3 }"),
    "tile": one("Tile", "tile_param { axis: 2 tiles: 3 }"),
    "mvn": one("MVN"),
    "mvn_across_mean_only": one("MVN", "mvn_param { across_channels: true "
                                "normalize_variance: false }"),
    "mvn_across": one("MVN", "mvn_param { across_channels: true eps: 0.01 }"),
    "embed": one("Embed", "embed_param { num_output: 6 input_dim: 10 }", {"data": (2, 5)}),
    "upsample": one("Upsample", "upsample_param { scale: 3 }"),
    # what the ONNX importer writes for a constant a layer reads; no input
    "parameter": ('layer { name: "layer" type: "Parameter" top: "out" '
                  'parameter_param { shape { dim: 2 dim: 3 dim: 4 } } }', {}),
}

POSITIVE = {"stochastic_pool_test", "log", "log_e"}


def inputs_for(key, net, shapes, rng):
    feeds = {}
    for name, shape in shapes.items():
        if key == "embed":
            feeds[name] = rng.integers(0, 10, shape).astype(np.float32)
        elif key in POSITIVE:
            feeds[name] = rng.uniform(0.1, 1.0, shape).astype(np.float32)
        else:
            feeds[name] = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
    return feeds


def export_and_compare(key, text, shapes, tmp_path, opset=None):
    net = net_from_text(text)
    rng = fill_random(net, seed=sum(map(ord, key)))
    feeds = inputs_for(key, net, shapes, rng)
    ours = {k: v.copy() for k, v in net.forward(**feeds).items()}
    path = tmp_path / (key + ".onnx")
    model, report = caffe_onnx.export(net, str(path), opset=opset)
    assert path.exists()
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    assert sorted(report["outputs"]) == sorted(ours)
    theirs = run_ort(model, feeds)
    for name, value in ours.items():
        assert_close(value, theirs[name], "%s: %s" % (key, name))
    return model


@pytest.mark.parametrize("key", sorted(CASES))
def test_layer_exports_with_caffe_numbers(key, tmp_path):
    text, shapes = CASES[key]
    model = export_and_compare(key, text, shapes, tmp_path)
    # names come from the Caffe net: the layer's node and its top
    assert any(n.name.startswith("layer") for n in model.graph.node) or key in (
        "split", "dropout", "parameter")  # parameter: an initializer, no node


@pytest.mark.parametrize("key", ["reduction_sum", "reduction_asum", "reduction_sumsq_all",
                                 "reduction_mean", "mvn", "batch_norm_batch_stats", "mish",
                                 "upsample", "slice", "ave_pool_divisor_at_border"])
def test_oldest_opset_13(key, tmp_path):
    """Reduce* axes are attributes before opset 18, Mish is composed before 18."""
    text, shapes = CASES[key]
    model = export_and_compare(key, text, shapes, tmp_path, opset=13)
    assert model.opset_import[0].version == 13


def test_every_converter_type_is_covered():
    covered = set()
    for text, _ in CASES.values():
        covered.add(text.split('type: "')[-1].split('"')[0])
    # the forks' converters are covered in test_onnx_forks.py
    forks = {t for t, fn in caffe_onnx.CONVERTERS.items()
             if fn.__module__.rsplit(".", 1)[-1] in ("ops_forks", "ops_detection")}
    assert set(caffe_onnx.CONVERTERS) - forks <= covered, \
        set(caffe_onnx.CONVERTERS) - forks - covered


def test_dynamic_batch_runs_other_batch_sizes(tmp_path):
    text = input_layers({"data": (2, 3, 6, 6)}) + """
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
        pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "r" type: "Reshape" bottom: "pool" top: "r"
        reshape_param { shape { dim: 0 dim: -1 } } }
layer { name: "flat" type: "Flatten" bottom: "r" top: "flat" }
layer { name: "ip" type: "InnerProduct" bottom: "flat" top: "ip"
        inner_product_param { num_output: 3 } }
layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }
"""
    net = net_from_text(text)
    rng = fill_random(net, 3)
    model, _ = caffe_onnx.export(net, None)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    for batch in (1, 5):
        x = rng.uniform(-1, 1, (batch, 3, 6, 6)).astype(np.float32)
        net.blobs["data"].reshape(*x.shape)
        net.reshape()
        ours = net.forward(data=x)["prob"]
        assert_close(ours, run_ort(model, {"data": x})["prob"], "batch %d" % batch)
    static, _ = caffe_onnx.export(net, None, static_batch=True)
    assert static.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 5


def test_losses_dropped_data_layers_become_inputs(tmp_path, caplog):
    text = """
layer { name: "d" type: "DummyData" top: "data" top: "label"
        dummy_data_param { shape { dim: 2 dim: 5 } shape { dim: 2 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
layer { name: "acc" type: "Accuracy" bottom: "ip" bottom: "label" top: "acc" }
"""
    net = net_from_text(text)
    fill_random(net)
    with caplog.at_level("INFO"):
        model, report = caffe_onnx.export(net, None)
    assert "dropped layer 'loss' (type SoftmaxWithLoss)" in caplog.text
    assert report["dropped"] == [("loss", "SoftmaxWithLoss"), ("acc", "Accuracy")]
    assert report["inputs"] == ["data"] and report["outputs"] == ["ip"]
    x = np.random.default_rng(0).uniform(-1, 1, (2, 5)).astype(np.float32)
    net.forward()
    net.blobs["data"].data[...] = x
    net.forward(start="ip", end="ip")
    assert_close(net.blobs["ip"].data, run_ort(model, {"data": x})["ip"], "ip")


def test_in_place_chain_keeps_blob_names(tmp_path):
    text = input_layers({"data": (1, 2, 4, 4)}) + """
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 2 kernel_size: 1 } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "drop" type: "Dropout" bottom: "conv1" top: "conv1" }
"""
    net = net_from_text(text)
    rng = fill_random(net)
    x = rng.uniform(-1, 1, (1, 2, 4, 4)).astype(np.float32)
    ours = net.forward(data=x)["conv1"]
    model, report = caffe_onnx.export(net, None)
    assert report["outputs"] == ["conv1"]
    assert [n.name for n in model.graph.node][:2] == ["conv1", "relu1"]
    assert_close(ours, run_ort(model, {"data": x})["conv1"], "conv1")


def test_unexportable_layer_is_named(tmp_path):
    text = input_layers({"data": (2, 3, 4, 4)}) + """
layer { name: "cols" type: "Im2col" bottom: "data" top: "out"
        convolution_param { kernel_size: 3 } }"""
    with pytest.raises(CaffeError, match="'cols' of type Im2col has no ONNX equivalent"):
        caffe_onnx.export(net_from_text(text), None)


def test_pooling_with_a_window_outside_the_input_is_refused():
    # kernel 2, stride 3 over 6 columns: Caffe rounds up to 3 windows, the last starting at
    # column 6 (no pad, so not clipped): ONNX's pooling cannot make it
    text = input_layers({"data": (1, 1, 2, 6)}) + """
layer { name: "pool" type: "Pooling" bottom: "data" top: "out"
        pooling_param { pool: MAX kernel_size: 2 stride: 3 } }"""
    net = net_from_text(text)
    assert net.blobs["out"].shape == (1, 1, 1, 3)
    with pytest.raises(CaffeError, match="layer 'pool' \\(type Pooling\\): kernel 2, stride "
                                         "3, pad 0 over width 6 gives 3 windows, the last one "
                                         "wholly outside the input"):
        caffe_onnx.export(net, None)
    # stride 2 over 7 columns with pad 0: the rounded-up window overlaps the input: exported
    net = net_from_text(text.replace("stride: 3", "stride: 2").replace("dim: 6", "dim: 7"))
    x = np.random.default_rng(2).uniform(-1, 1, (1, 1, 2, 7)).astype(np.float32)
    assert_close(net.forward(data=x)["out"], run_ort(caffe_onnx.export(net, None)[0],
                                                     {"data": x})["out"], "out")


def test_converter_registry_is_the_extension_point(tmp_path):
    text = input_layers({"data": (2, 3)}) + """
layer { name: "i2c" type: "Im2col" bottom: "data" top: "out"
        convolution_param { kernel_size: 1 } }"""
    assert "Im2col" not in caffe_onnx.CONVERTERS
    try:
        @caffe_onnx.register_converter("Im2col")
        def identity(call):
            call.node("Identity", call.inputs, call.outputs)
        model, _ = caffe_onnx.export(net_from_text(text.replace('dim: 2 dim: 3',
                                                                'dim: 2 dim: 3 dim: 1 dim: 1')),
                                     None)
        assert [n.op_type for n in model.graph.node] == ["Identity"]
    finally:
        caffe_onnx.CONVERTERS.pop("Im2col", None)


def test_missing_onnx_names_the_extra(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx now raises ImportError
    net = net_from_text(input_layers({"data": (1, 2)}) +
                        'layer { name: "r" type: "ReLU" bottom: "data" top: "r" }')
    hint = r"pip install onnx onnxruntime \(or the onnx extra: pip install '\.\[onnx\]'"
    with pytest.raises(CaffeError, match=hint):
        caffe_onnx.export(net, None)
    with pytest.raises(CaffeError, match=hint):
        caffe_onnx.to_caffe("model.onnx", None)


def test_opset_out_of_range_is_refused():
    net = net_from_text(input_layers({"data": (1, 2)}) +
                        'layer { name: "r" type: "ReLU" bottom: "data" top: "r" }')
    with pytest.raises(CaffeError, match="opset 9 is not supported"):
        caffe_onnx.export(net, None, opset=9)
    model, _ = caffe_onnx.export(net, None, opset=13)
    assert model.opset_import[0].version == 13


CONSTANT_NET = """name: "constant"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 2 weight_filler { type: "constant" value: 0.5 }
                              bias_filler { type: "constant" value: -1 } } }
"""


def test_export_command_refuses_to_export_fillers_without_being_told(tmp_path, capsys):
    from onnx import numpy_helper

    from pycaffe_lite import cli

    model, out = tmp_path / "net.prototxt", tmp_path / "net.onnx"
    model.write_text(CONSTANT_NET)
    assert cli.main(["export_onnx", "--model", str(model), "--output", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["pycaffe-lite export_onnx: error: no --weights: the model would hold the "
                   "fillers' random weights, not trained ones; give --weights w.caffemodel, or "
                   "--random_weights to export the fillers' values on purpose"]
    assert not out.exists()
    assert cli.main(["export_onnx", "--model", str(model), "--output", str(out),
                     "--random_weights"]) == 0
    values = sorted(numpy_helper.to_array(t).ravel().tolist()
                    for t in onnx.load(str(out)).graph.initializer if t.dims)
    assert [0.5] * 6 in values and [-1.0, -1.0] in values  # the fillers', as asked


def test_a_graph_the_checker_rejects_is_an_error_naming_the_node():
    """A converter (here one of one's own) whose graph onnx.checker rejects: a CaffeError
    with the checker's message, which names the node after its layer, not a bare
    ValidationError or InferenceError from onnx."""
    text = input_layers({"data": (2, 3)}) + """
layer { name: "i2c" type: "Im2col" bottom: "data" top: "out"
        convolution_param { kernel_size: 1 } }"""
    try:
        @caffe_onnx.register_converter("Im2col")
        def wrong_rank(call):  # a 2-D value where the net declares 4 axes
            call.reshape(call.inputs[0], [0, -1], call.outputs)
        net = net_from_text(text.replace('dim: 2 dim: 3', 'dim: 2 dim: 3 dim: 1 dim: 1'))
        with pytest.raises(CaffeError, match="fails onnx.checker.*i2c"):
            caffe_onnx.export(net, None)
    finally:
        caffe_onnx.CONVERTERS.pop("Im2col", None)
