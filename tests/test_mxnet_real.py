"""Pieces of published MXNet models, and .params files as MXNet 1.9.1 writes them.

The references under tests/fixtures/mxnet_real were written by MXNet 1.9.1
(``tools/mxnet_real_reference.py``, in a venv of its own): each model case is cut down from
the file its manifest entry names; its symbol and params files as MXNet writes them, an input
and MXNet's outputs. Outputs must match MXNet's to 1e-5 relative (with an absolute floor of
1e-5 times the output's largest magnitude).
"""

import json
import os

import numpy as np
import pytest

from pycaffe_lite import mxnet
from pycaffe_lite.errors import CaffeError

REAL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "mxnet_real")
with open(os.path.join(REAL, "manifest.json")) as _f:
    MANIFEST = json.load(_f)
RTOL = 1e-5


def _case(case):
    entry = MANIFEST[case]
    shapes = {k: tuple(v["shape"]) for k, v in entry["inputs"].items()}
    net = mxnet.load(os.path.join(REAL, case + "-symbol.json"),
                     os.path.join(REAL, case + "-0000.params"), shapes)
    for name, v in entry["inputs"].items():
        net.blobs[name].data[...] = np.load(os.path.join(REAL, v["file"])).astype(np.float32)
    net.forward()
    _, outputs = mxnet.convert(os.path.join(REAL, case + "-symbol.json"),
                               os.path.join(REAL, case + "-0000.params"), shapes)
    refs = [np.load(os.path.join(REAL, f)) for f in entry["outputs"]]
    assert len(outputs) == len(refs)
    for i, (blob, ref) in enumerate(zip(outputs, refs)):
        got = net.blobs[blob].data
        assert got.shape == ref.shape, (case, i, got.shape, ref.shape)
        np.testing.assert_allclose(got, ref, rtol=RTOL, atol=RTOL * float(np.abs(ref).max()),
                                   err_msg="%s output %d (%s)" % (case, i, blob))
    return net


def test_gluon_prelu_with_one_slope_for_all_channels():
    """Gluon's nn.PReLU() (one slope of shape (1,), as InsightFace's fmnasnet and fdensenet
    export it) is Caffe's shared-slope PReLU, whose blob has no axes."""
    net = _case("gluon_prelu_shared")
    prelus = [layer for layer in net.layers if layer.type == "PReLU"]
    assert len(prelus) == 2
    assert all(tuple(layer.blobs[0].shape) == () for layer in prelus)


def test_alexnet_lrn_is_caffes_lrn():
    """apache/mxnet's example AlexNet: LRN(alpha, beta, knorm, nsize) across channels."""
    net = _case("alexnet_lrn")
    assert sum(layer.type == "LRN" for layer in net.layers) == 2


def _one_node_symbol(tmp_path, prefix, op, name, attrs):
    """A symbol file (``prefix``-symbol.json) of the input 'data' and one node on it, the
    graph's output; its path."""
    doc = {"nodes": [{"op": "null", "name": "data", "inputs": []},
                     {"op": op, "name": name, "attrs": attrs, "inputs": [[0, 0, 0]]}],
           "arg_nodes": [0], "heads": [[1, 0, 0]]}
    path = tmp_path / ("%s-symbol.json" % prefix)
    path.write_text(json.dumps(doc))
    return str(path)


def _lrn_symbol(tmp_path, nsize):
    return _one_node_symbol(tmp_path, "lrn", "LRN", "norm1", {"nsize": str(nsize)})


def test_lrn_with_an_even_window_names_the_node(tmp_path):
    """MXNet's own LRN kernel accepts odd windows only (mshadow's chpool), as Caffe's does."""
    with pytest.raises(CaffeError, match=r"'norm1' \(op LRN\): nsize=4"):
        mxnet.convert(_lrn_symbol(tmp_path, 4), None, {"data": (1, 6, 3, 3)})
    x = np.random.default_rng(0).normal(size=(1, 6, 2, 2)).astype(np.float32)
    net = mxnet.load(_lrn_symbol(tmp_path, 3), None, {"data": x.shape})
    net.blobs["data"].data[...] = x
    net.forward()
    # MXNet's defaults: alpha 1e-4, beta 0.75, knorm 2; the window: a channel and its two
    # neighbours, clipped at the ends
    sq = np.pad(x.astype(np.float64) ** 2, ((0, 0), (1, 1), (0, 0), (0, 0)))
    window = sq[:, :-2] + sq[:, 1:-1] + sq[:, 2:]
    want = x / (2.0 + 1e-4 / 3 * window) ** 0.75
    np.testing.assert_allclose(net.blobs["norm1"].data, want, rtol=1e-6)


def test_every_element_type_mxnet_writes_is_read():
    """float32/16/64, bfloat16 (MXNet's AMP), bool and the integer types: the values MXNet
    itself reads back from the file."""
    with open(os.path.join(REAL, "params_types.params"), "rb") as f:
        parsed = mxnet.parse_params(f.read(), "params_types.params")
    with open(os.path.join(REAL, "params_types.json")) as f:
        want = json.load(f)
    assert sorted(parsed) == sorted(want)
    for key, ref in want.items():
        got = parsed[key]
        assert list(got.shape) == ref["shape"], key
        np.testing.assert_array_equal(got.astype(np.float64).ravel(), ref["values"], key)
    assert parsed["arg:bfloat16"].dtype == np.float32
    assert parsed["aux:bool"].dtype == np.bool_
    args, aux = mxnet.read_params(os.path.join(REAL, "params_types.params"))
    assert args["bfloat16"].dtype == np.float32 and aux["bool"].tolist() == [1.0, 0.0, 1.0]


def test_gluoncv_squeeze_excitation_by_adaptive_pooling():
    """GluonCV's SE-ResNeXt / SENet-154 squeeze: contrib.AdaptiveAvgPooling2D to 1 x 1 (a
    global average), and output sizes that divide the input (a plain average pooling)."""
    net = _case("gluoncv_se_adaptive")
    pools = [layer for layer in net.layers if layer.type == "Pooling"]
    assert len(pools) == 3


def test_adaptive_pooling_windows_of_different_sizes_name_the_node(tmp_path):
    path = _one_node_symbol(tmp_path, "adaptive", "_contrib_AdaptiveAvgPooling2D", "squeeze",
                            {"output_size": "(3, 2)"})
    with pytest.raises(CaffeError, match=r"'squeeze' \(op _contrib_AdaptiveAvgPooling2D\): "
                                         r"output_size \(3, 2\) from an input of 7 x 4"):
        mxnet.convert(path, None, {"data": (1, 2, 7, 4)})
    # 6 x 4 to 3 x 2: means of 2 x 2 blocks
    x = np.arange(48, dtype=np.float32).reshape(1, 2, 6, 4)
    net = mxnet.load(path, None, {"data": x.shape})
    net.blobs["data"].data[...] = x
    net.forward()
    want = x.reshape(1, 2, 3, 2, 2, 2).mean(axis=(3, 5))
    np.testing.assert_array_equal(net.blobs["squeeze"].data, want)


def test_3d_pooling_is_refused_as_3d_not_for_its_layout(tmp_path):
    """GluonCV's I3D-ResNet (an exported model-symbol.json of i3d_resnet50_v1): its 3-D
    convolutions convert; its pooling (layout NCDHW, channels-first like Caffe's blobs) is
    refused because it is 3-D, and the message says so."""
    path = _one_node_symbol(tmp_path, "i3d", "Pooling", "pool0_fwd", {
        "global_pool": "False", "kernel": "(1, 3, 3)", "layout": "NCDHW", "pad": "(0, 1, 1)",
        "pool_type": "max", "pooling_convention": "valid", "stride": "(2, 2, 2)"})
    with pytest.raises(CaffeError, match=r"'pool0_fwd' \(op Pooling\): only 2-D pooling "
                                         r"converts \(input of shape \(1, 2, 4, 6, 6\)\)"):
        mxnet.convert(path, None, {"data": (1, 2, 4, 6, 6)})


def test_fcn_xs_deconvolution_with_adj_larger_than_pad():
    """apache/mxnet's FCN-xs: Deconvolution(kernel 64, stride 32, adj 31, pad 0) and the
    FCN-8s one (kernel 4, stride 2, adj 1): the adj rows past the full transposed
    convolution, which no input reaches, hold the bias."""
    net = _case("fcn_xs_deconv_adj")
    ref = np.load(os.path.join(REAL, "fcn_xs_deconv_adj-out2.npy"))
    # score2's last row and column: its bias, per channel
    bias = ref[0, :, -1, -1]
    np.testing.assert_allclose(ref[0, :, -1, :], bias[:, None] * np.ones((1, ref.shape[3])),
                               rtol=1e-6)
    assert net.blobs["score2"].data.shape == ref.shape


def test_gluoncv_pyramid_pooling_and_resizing():
    """GluonCV's PSPNet pyramid (adaptive pooling to 1, 2, 3, 6 and BilinearResize2D back) and
    its segmentation heads' resizing: Caffe's Interp (corners aligned, as MXNet's default);
    to a size, by scales (MXNet's float32 product, truncated: 12 x 2.6 -> 31) and like an
    input."""
    net = _case("gluoncv_pyramid_resize")
    assert sum(layer.type == "Interp" for layer in net.layers) == 7


def test_resizing_with_half_pixel_sampling_names_the_node(tmp_path):
    path = _one_node_symbol(tmp_path, "resize", "_contrib_BilinearResize2D", "up",
                            {"height": "8", "width": "8", "align_corners": "False"})
    with pytest.raises(CaffeError, match=r"'up' \(op _contrib_BilinearResize2D\): "
                                         r"align_corners=False"):
        mxnet.convert(path, None, {"data": (1, 2, 4, 4)})
