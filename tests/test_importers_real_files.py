"""Importing models as their publishers and exporters write them: PyTorch's ONNX exporter
(``torch.onnx.export(..., dynamo=False)``) and the published Darknet ``.cfg`` files. Results are
compared with onnxruntime, OpenCV's Darknet importer or a NumPy reference; what does not
convert must be an error naming the node (ONNX) or the file, line and section (Darknet)."""

import io

import numpy as np
import pytest

from pycaffe_lite import onnx as caffe_onnx
from pycaffe_lite.errors import CaffeError

onnx = pytest.importorskip("onnx", reason="the onnx extra")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is a test extra")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


# -- ONNX: If nodes ------------------------------------------------------------------------
def _if_model(branch_input, initializers=()):
    """``y = If(True) then Relu(v) else Neg(v)``, ``v`` a value of the enclosing graph; the
    graph's output is ``x * y``."""
    value = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, None)  # noqa: E731
    then_g = helper.make_graph([helper.make_node("Relu", [branch_input], ["t"])], "then", [],
                               [value("t")])
    else_g = helper.make_graph([helper.make_node("Neg", [branch_input], ["e"])], "else", [],
                               [value("e")])
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
             helper.make_node("Constant", [], ["c"], name="cond",
                              value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
             helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g,
                              else_branch=else_g),
             helper.make_node("Mul", ["s", "y"], ["out"], name="mul")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 2])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 2, 2])],
        list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    # onnx's helper writes its own newest IR version, which an older onnxruntime refuses
    # (onnx 1.23 writes 14, onnxruntime 1.23 reads up to 11): the IR of opset 13
    model.ir_version = 7
    return model


def test_if_whose_branches_read_constants_of_the_enclosing_graph_folds(tmp_path):
    """An If on a constant condition whose branch reads an initializer of the enclosing graph
    (the form PyTorch's exporter gives data-dependent Python branches) is folded to that
    branch's value; the folding used to stop with onnx's 'Unable to find input' RuntimeError."""
    import pycaffe_lite as caffe
    k = np.array([-1.0, 0.5, 2.0], np.float32).reshape(1, 3, 1, 1)
    model = _if_model("k", [numpy_helper.from_array(k, "k")])
    x = np.random.default_rng(0).normal(size=(1, 3, 2, 2)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(expected, 1 / (1 + np.exp(-x)) * np.maximum(k, 0), rtol=1e-6)
    _, _, outs = caffe_onnx.to_caffe(model, tmp_path / "m")
    net = caffe.Net(str(tmp_path / "m.prototxt"), str(tmp_path / "m.caffemodel"), caffe.TEST)
    net.blobs["x"].data[...] = x
    net.forward()
    np.testing.assert_allclose(net.blobs[outs["out"]].data, expected, rtol=1e-5, atol=1e-7)


def test_if_whose_branch_reads_a_tensor_names_the_node():
    """A branch reading a computed tensor cannot fold: the error names the If node (it was a
    bare RuntimeError from onnx's reference evaluator)."""
    with pytest.raises(CaffeError, match=r"ONNX node 'branch' \(op If\)"):
        caffe_onnx.to_caffe(_if_model("s"), None)


def test_torch_local_response_norm_names_the_node_it_stops_at(opset=13):
    """``F.local_response_norm`` as torch 2's exporter writes it (Pad, AveragePool and an If
    on the input's rank whose branches read the pooled tensor): a clear error naming the first
    node that does not convert, not a RuntimeError from folding the If."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    class LRN(torch.nn.Module):
        def forward(self, x):
            return F.local_response_norm(x, 3)

    buf = io.BytesIO()
    torch.onnx.export(LRN().eval(), (torch.zeros(1, 4, 3, 3),), buf, dynamo=False,
                      opset_version=opset, input_names=["x"], output_names=["y"])
    model = onnx.load_from_string(buf.getvalue())
    assert "If" in {n.op_type for n in model.graph.node}
    with pytest.raises(CaffeError, match=r"ONNX node '[^']+' \(op (Pad|If|Div|AveragePool)\)"):
        caffe_onnx.to_caffe(model, None)


# -- Darknet: published .cfg files ---------------------------------------------------------
def _darknet_weights(layers, seed):
    """A ``.weights`` file (header 0.2.0, 64-bit seen) for ``[convolutional]`` layers given as
    (filters, channels, size, batch_normalize): biases, then scales, rolling mean and
    variance when batch-normalised, then the weights."""
    rng = np.random.default_rng(seed)
    parts = [np.array([0, 2, 0], np.int32).tobytes(), np.array([0], np.int64).tobytes()]
    for n, c, k, bn in layers:
        arrays = [rng.normal(0, 0.5, n)]
        if bn:
            arrays += [rng.uniform(0.5, 1.5, n), rng.normal(0, 0.3, n), rng.uniform(0.3, 2, n)]
        arrays.append(rng.normal(0, 1 / np.sqrt(c * k * k), n * c * k * k))
        parts += [np.asarray(a, np.float32).tobytes() for a in arrays]
    return b"".join(parts)


def _ours(tmp_path, cfg_text, layers, seed=0):
    """The conversion and the converted net after a forward pass on a random input (the
    files are m.cfg and m.weights in ``tmp_path``)."""
    import pycaffe_lite
    from pycaffe_lite.darknet import darknet2caffe
    cfg, weights = tmp_path / "m.cfg", tmp_path / "m.weights"
    cfg.write_text(cfg_text)
    weights.write_bytes(_darknet_weights(layers, seed))
    result = darknet2caffe(str(cfg), str(weights), str(tmp_path / "m.prototxt"),
                           str(tmp_path / "m.caffemodel"))
    ours = pycaffe_lite.Net(str(tmp_path / "m.prototxt"), str(tmp_path / "m.caffemodel"),
                            pycaffe_lite.TEST)
    ours.blobs["data"].data[...] = np.random.default_rng(seed + 1).uniform(
        0, 1, ours.blobs["data"].data.shape)
    ours.forward()
    return result, ours


def _ours_and_opencv(tmp_path, cfg_text, layers, seed=0):
    import warnings

    cv2 = pytest.importorskip("cv2", reason="OpenCV (opencv-python-headless) is a test extra")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result, ours = _ours(tmp_path, cfg_text, layers, seed)
    theirs = cv2.dnn.readNetFromDarknet(str(tmp_path / "m.cfg"), str(tmp_path / "m.weights"))
    theirs.setInput(ours.blobs["data"].data.astype(np.float32))
    return result, ours, theirs.forward(), [str(w.message) for w in caught]


def test_route_layers_with_a_trailing_comment(tmp_path):
    """AlexeyAB's cfg/cspx-p7-mish.cfg has ``layers = 180 ###P6`` (line 1548) and ``layers =
    -1, 271 ###S4`` (line 1957): Darknet reads each entry with atoi, which stops at the '#'.
    The conversion refused them ("entry '180###P6' is not an integer"); it now reads them as
    Darknet (and OpenCV) do, with a warning naming the line."""
    cfg = ("[net]\nwidth=8\nheight=8\nchannels=3\n\n"
           "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\nstride=1\npad=1\n"
           "activation=mish\n\n"
           "[convolutional]\nbatch_normalize=1\nfilters=6\nsize=1\nstride=1\npad=1\n"
           "activation=mish\n\n"
           "[route]\nlayers = 0 ###P6\n\n"                                        # line 23
           "[convolutional]\nfilters=5\nsize=3\nstride=1\npad=1\nactivation=leaky\n\n"
           "[route]\nlayers = -1, 1 ###S4\n\n"                                    # line 33
           "[convolutional]\nfilters=3\nsize=1\nstride=1\npad=1\nactivation=linear\n")
    layers = [(4, 3, 3, 1), (6, 4, 1, 1), (5, 4, 3, 0), (3, 11, 1, 0)]
    result, ours, theirs, warned = _ours_and_opencv(tmp_path, cfg, layers)
    assert result.blob_of_layer[2] == result.blob_of_layer[0]
    got = ours.blobs[result.blob_of_layer[5]].data
    assert got.shape == theirs.shape == (1, 3, 8, 8)
    np.testing.assert_allclose(got, theirs, rtol=1e-4, atol=1e-5 * np.abs(theirs).max())
    assert any(":23:" in w and "###P6" in w for w in warned), warned
    assert any(":33:" in w and "###S4" in w for w in warned), warned


def test_shortcut_between_layers_of_different_channels(tmp_path):
    """The ResNet and CSPResNeXt cfgs (pjreddie's and AlexeyAB's cfg/resnet50.cfg line 66,
    AlexeyAB's cfg/csresnext50-panet-spp.cfg line 86) add a 64-channel layer to a 256- or
    128-channel one: Darknet adds the first min(channels) channels and passes the previous
    layer's others unchanged. The conversion refused those shortcuts; both directions (fewer
    and more channels added) now agree with OpenCV's importer."""
    cfg = ("[net]\nwidth=6\nheight=6\nchannels=3\n\n"
           "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\nstride=1\npad=1\n"
           "activation=leaky\n\n"
           "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=1\nstride=1\npad=1\n"
           "activation=leaky\n\n"
           "[shortcut]\nfrom=-2\nactivation=linear\n\n"          # 8 channels + 4
           "[convolutional]\nbatch_normalize=1\nfilters=2\nsize=1\nstride=1\npad=1\n"
           "activation=leaky\n\n"
           "[shortcut]\nfrom=-3\nactivation=leaky\n\n"           # 2 channels + 8
           "[convolutional]\nfilters=3\nsize=1\nstride=1\npad=1\nactivation=linear\n")
    layers = [(4, 3, 3, 1), (8, 4, 1, 1), (2, 8, 1, 1), (3, 2, 1, 0)]
    result, ours, theirs, _ = _ours_and_opencv(tmp_path, cfg, layers, seed=3)
    got = ours.blobs[result.blob_of_layer[5]].data
    assert ours.blobs[result.blob_of_layer[2]].data.shape == (1, 8, 6, 6)
    assert ours.blobs[result.blob_of_layer[4]].data.shape == (1, 2, 6, 6)
    assert got.shape == theirs.shape == (1, 3, 6, 6)
    np.testing.assert_allclose(got, theirs, rtol=1e-4, atol=1e-5 * np.abs(theirs).max())
    # Darknet's rule by hand on our own inputs to the two shortcuts
    b = {i: ours.blobs[result.blob_of_layer[i]].data[0] for i in range(5)}
    first = b[1].copy()
    first[:4] += b[0]
    np.testing.assert_allclose(b[2], first, rtol=1e-6, atol=1e-7)
    second = b[3] + b[1][:2]
    np.testing.assert_allclose(b[4], np.where(second > 0, second, 0.1 * second), rtol=1e-6,
                               atol=1e-7)


CLASSIFIER_TAIL = ("[net]\nwidth=6\nheight=6\nchannels=3\n\n"
                   "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\nstride=1\npad=1\n"
                   "activation=leaky\n\n"
                   "[convolutional]\nfilters=5\nsize=1\nstride=1\npad=1\nactivation=linear\n\n"
                   "[avgpool]\n\n[softmax]\ngroups=1\n\n[cost]\ntype=sse\n")


def test_classifier_ending_with_a_cost_section(tmp_path):
    """AlexeyAB's classifier cfgs end with ``[softmax]`` then ``[cost] type=sse``
    (cfg/darknet19.cfg line 192; also darknet.cfg, extraction.cfg, densenet201.cfg,
    tiny.cfg). The loss is read in training only, and Darknet's output is the layer's before
    it; the conversion refused the whole file ("[cost] sections cannot be converted"). It now
    gives the softmax as the output (as OpenCV, which reads [cost] as an identity), and
    notes the loss."""
    layers = [(4, 3, 3, 1), (5, 4, 1, 0)]
    result, ours, theirs, _ = _ours_and_opencv(tmp_path, CLASSIFIER_TAIL, layers, seed=5)
    assert result.outputs == [result.blob_of_layer[3]] == ["softmax3"]
    assert result.blob_of_layer[4] == "softmax3"
    got = ours.blobs["softmax3"].data
    assert got.shape == (1, 5, 1, 1) == theirs.shape
    np.testing.assert_allclose(got, theirs, rtol=1e-4, atol=1e-6)
    assert any(":26: layer 4 [cost]: a training loss" in n for n in result.notes), result.notes


def test_cost_section_before_another_layer_is_refused():
    """A [cost] that another section reads would give that section the loss layer's
    output, which Darknet never computes at inference: an error naming file, line and
    section."""
    from pycaffe_lite.darknet import DarknetError, convert
    text = CLASSIFIER_TAIL.replace("[avgpool]\n\n", "[cost]\n\n[avgpool]\n\n", 1)
    with pytest.raises(DarknetError, match=r"<string>:21: layer 2 \[cost\]: a \[cost\] "
                                           r"section .* layer 3 \[avgpool\] follows it"):
        convert(text)


def _darknet_reorg_cpu(x, w, h, c, stride, forward):
    """Darknet's ``reorg_cpu(x, w, h, c, batch, stride, forward, out)`` (blas.c) for one
    image, its index arithmetic over flat arrays, as ``forward_reorg_layer`` calls it with
    the layer's input sizes."""
    x = np.asarray(x, np.float64).ravel()
    out = np.zeros_like(x)
    out_c = c // (stride * stride)
    k, j, i = np.meshgrid(np.arange(c), np.arange(h), np.arange(w), indexing="ij")
    in_index = i + w * (j + h * k)
    c2, offset = k % out_c, k // out_c
    w2, h2 = i * stride + offset % stride, j * stride + offset // stride
    out_index = w2 + w * stride * (h2 + h * stride * c2)
    if forward:
        out[out_index] = x[in_index]
    else:
        out[in_index] = x[out_index]
    return out


YOLOV2_PASSTHROUGH = (
    "[net]\nwidth=8\nheight=8\nchannels=3\n\n"
    "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\nstride=1\npad=1\n"
    "activation=leaky\n\n"
    "[maxpool]\nsize=2\nstride=2\n\n"
    "[convolutional]\nbatch_normalize=1\nfilters=6\nsize=3\nstride=1\npad=1\n"
    "activation=leaky\n\n"
    "[route]\nlayers=-3\n\n"
    "[convolutional]\nbatch_normalize=1\nsize=1\nstride=1\npad=1\nfilters=4\n"
    "activation=leaky\n\n"
    "[reorg]\nstride=2\n\n"                                                # lines 37, 38
    "[route]\nlayers=-1,-4\n\n"
    "[convolutional]\nsize=1\nstride=1\npad=1\nfilters=5\nactivation=linear\n")


def test_reorg_of_yolov2(tmp_path):
    """pjreddie's cfg/yolov2.cfg and yolov2-voc.cfg (line 211) pass a 26x26x64 map through
    ``[reorg] stride=2`` into the last route, as this cut-down cfg does (8x8x4 -> 4x4x16).
    The conversion refused ``[reorg]``; it is now a ``Reorg`` layer in Darknet's element
    order, which agrees with OpenCV's importer and with Darknet's reorg_cpu index arithmetic
    (called with the input's sizes and forward=0, as forward_reorg_layer does)."""
    layers = [(4, 3, 3, 1), (6, 4, 3, 1), (4, 4, 1, 1), (5, 22, 1, 0)]
    result, ours, theirs, _ = _ours_and_opencv(tmp_path, YOLOV2_PASSTHROUGH, layers, seed=7)
    assert result.blob_of_layer[5] == "reorg5"
    got = ours.blobs[result.blob_of_layer[7]].data
    assert got.shape == theirs.shape == (1, 5, 4, 4)
    np.testing.assert_allclose(got, theirs, rtol=1e-4, atol=1e-5 * np.abs(theirs).max())
    before = ours.blobs[result.blob_of_layer[4]].data[0]
    reorg = ours.blobs["reorg5"].data[0]
    assert reorg.shape == (16, 4, 4)
    np.testing.assert_array_equal(reorg.ravel(), _darknet_reorg_cpu(before, 8, 8, 4, 2, 0))


def test_reverse_reorg_and_a_reorg_that_does_not_divide(tmp_path):
    """``reverse=1`` (depth to space; OpenCV does not read it) is Darknet's reorg_cpu with
    forward=1; an input whose height does not divide by the stride, where Darknet would
    write past its output, is an error naming the file, line and section."""
    from pycaffe_lite.darknet import DarknetError, convert
    cfg = ("[net]\nwidth=4\nheight=4\nchannels=3\n\n"
           "[convolutional]\nfilters=8\nsize=3\nstride=1\npad=1\nactivation=leaky\n\n"
           "[reorg]\nstride=2\nreverse=1\n\n"
           "[convolutional]\nfilters=3\nsize=1\nstride=1\npad=1\nactivation=linear\n")
    result, ours = _ours(tmp_path, cfg, [(8, 3, 3, 0), (3, 2, 1, 0)], seed=8)
    before = ours.blobs[result.blob_of_layer[0]].data[0]
    reorg = ours.blobs["reorg1"].data[0]
    assert reorg.shape == (2, 8, 8)
    np.testing.assert_array_equal(reorg.ravel(), _darknet_reorg_cpu(before, 4, 4, 8, 2, 1))
    assert ours.blobs[result.blob_of_layer[2]].data.shape == (1, 3, 8, 8)
    odd = YOLOV2_PASSTHROUGH.replace("width=8\nheight=8", "width=8\nheight=7")
    with pytest.raises(DarknetError, match=r"<string>:38: layer 5 \[reorg\]: the input, "
                                           r"4x7x8, does not divide by stride=2"):
        convert(odd)


SQUEEZE_EXCITATION = (
    "[net]\nwidth=8\nheight=6\nchannels=3\n\n"
    "[convolutional]\nbatch_normalize=1\nfilters=8\nsize=3\nstride=1\npad=1\n"
    "activation=swish\n\n"
    "[avgpool]\n\n"
    "[convolutional]\nfilters=4\nsize=1\nstride=1\nactivation=swish\n\n"
    "[convolutional]\nfilters=8\nsize=1\nstride=1\nactivation=logistic\n\n"
    "[scale_channels]\nfrom=-4\n%s\n"                                   # lines 28, 29, 30
    "[convolutional]\nbatch_normalize=1\nfilters=3\nsize=1\nstride=1\npad=1\n"
    "activation=linear\n")
SQUEEZE_LAYERS = [(8, 3, 3, 1), (4, 8, 1, 0), (8, 4, 1, 0), (3, 8, 1, 1)]


def test_scale_channels_of_efficientnet_b0(tmp_path):
    """AlexeyAB's cfg/efficientnet_b0.cfg (line 85, 16 blocks) and enet-coco.cfg end each
    squeeze-and-excitation block with ``[scale_channels] from=-4``: the block's input times
    the logistic excitation, one value per channel, as in this cut-down block. The conversion
    refused ``[scale_channels]``; it now agrees with OpenCV's importer, and the product is
    forward_scale_channels_layer's ``input[i / (h * w)] * from[i]``; an activation applies
    after it."""
    cfg = SQUEEZE_EXCITATION % "activation=leaky\n"
    result, ours, theirs, _ = _ours_and_opencv(tmp_path, cfg, SQUEEZE_LAYERS, seed=9)
    got = ours.blobs[result.blob_of_layer[5]].data
    assert got.shape == theirs.shape == (1, 3, 6, 8)
    np.testing.assert_allclose(got, theirs, rtol=1e-4, atol=1e-5 * np.abs(theirs).max())
    frm = ours.blobs[result.blob_of_layer[0]].data.ravel()
    excite = ours.blobs[result.blob_of_layer[3]].data.ravel()
    product = excite[np.arange(frm.size) // 48] * frm
    np.testing.assert_allclose(ours.blobs["scale_channels4"].data.ravel(),
                               np.where(product > 0, product, 0.1 * product), rtol=1e-6,
                               atol=1e-7)


def test_scale_channels_per_position_and_what_darknet_does_not_compute(tmp_path):
    """``scale_wh=1`` scales each position of every channel by the previous layer's 1 x H x W
    map (forward_scale_channels_layer: ``input[i % (h * w) + b * h * w] * from[i]``; OpenCV
    does not read it). ``activation=swish``, which Darknet's activate() turns into zeros
    there, and a previous layer of the wrong shape are errors naming file, line and
    section."""
    from pycaffe_lite.darknet import DarknetError, convert
    cfg = ("[net]\nwidth=8\nheight=6\nchannels=3\n\n"
           "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\nstride=1\npad=1\n"
           "activation=leaky\n\n"
           "[convolutional]\nfilters=1\nsize=1\nstride=1\nactivation=logistic\n\n"
           "[scale_channels]\nfrom=-2\nscale_wh=1\n\n"
           "[convolutional]\nfilters=3\nsize=1\nstride=1\npad=1\nactivation=linear\n")
    result, ours = _ours(tmp_path, cfg, [(4, 3, 3, 1), (1, 4, 1, 0), (3, 4, 1, 0)], seed=10)
    frm = ours.blobs[result.blob_of_layer[0]].data.ravel()
    scale = ours.blobs[result.blob_of_layer[1]].data.ravel()
    got = ours.blobs["scale_channels2"].data
    assert got.shape == (1, 4, 6, 8)
    np.testing.assert_allclose(got.ravel(), scale[np.arange(frm.size) % 48] * frm, rtol=1e-6,
                               atol=1e-7)
    with pytest.raises(DarknetError, match=r"<string>:30: layer 4 \[scale_channels\]: "
                                           r"activation=swish: Darknet's \[scale_channels\] "
                                           r"does not compute it"):
        convert(SQUEEZE_EXCITATION % "activation=swish\n")
    with pytest.raises(DarknetError, match=r"<string>:31: layer 5 \[scale_channels\]: the "
                                           r"previous layer must give one value per channel "
                                           r"of the from layer \(8x1x1 for 8x6x8\); it gives "
                                           r"8x6x8"):
        convert(SQUEEZE_EXCITATION.replace("from=-4", "from=-5").replace(
            "[avgpool]\n\n", "[avgpool]\n\n[route]\nlayers=-2\n\n") % "")


def test_sam_of_cspx_p7(tmp_path):
    """AlexeyAB's cfg/cspx-p7-mish.cfg (line 2327, 13 blocks) multiplies a mish
    convolution by a logistic one of the same shape with ``[sam] from=-2``, as this cut-down
    block does; the conversion refused ``[sam]``. It now agrees with OpenCV's importer, and
    the product is forward_sam_layer's element by element one."""
    cfg = ("[net]\nwidth=8\nheight=6\nchannels=3\n\n"
           "[convolutional]\nbatch_normalize=1\nfilters=5\nsize=3\nstride=1\npad=1\n"
           "activation=mish\n\n"
           "[convolutional]\nbatch_normalize=1\nfilters=5\nsize=1\nstride=1\npad=1\n"
           "activation=logistic\n\n"
           "[sam]\nfrom=-2\n\n"
           "[convolutional]\nbatch_normalize=1\nfilters=3\nsize=1\nstride=1\npad=1\n"
           "activation=mish\n")
    layers = [(5, 3, 3, 1), (5, 5, 1, 1), (3, 5, 1, 1)]
    result, ours, theirs, _ = _ours_and_opencv(tmp_path, cfg, layers, seed=11)
    got = ours.blobs[result.blob_of_layer[3]].data
    assert got.shape == theirs.shape == (1, 3, 6, 8)
    np.testing.assert_allclose(got, theirs, rtol=1e-4, atol=1e-5 * np.abs(theirs).max())
    np.testing.assert_allclose(ours.blobs["sam2"].data,
                               ours.blobs[result.blob_of_layer[0]].data *
                               ours.blobs[result.blob_of_layer[1]].data, rtol=1e-6, atol=1e-7)


def test_yolo_new_coords_of_yolov4_csp(tmp_path):
    """AlexeyAB's cfg/yolov4-csp.cfg (line 1050; also yolov4-p5/p6, yolov4x-mish,
    yolov7(-tiny), cspx-p7-mish) ends each head with a logistic convolution and ``[yolo]
    scale_x_y=2.0 new_coords=1``. The conversion refused new_coords=1; the head now gives what
    forward_yolo_layer leaves with new_coords (no logistic: x, y = scale_x_y t - (scale_x_y -
    1) / 2, the rest as the input), and decoded as get_yolo_box does then (w, h = (2 t)^2
    anchor / input size) it agrees with OpenCV's detections."""
    cfg = ("[net]\nwidth=16\nheight=12\nchannels=3\n\n"
           "[convolutional]\nbatch_normalize=1\nfilters=4\nsize=3\nstride=2\npad=1\n"
           "activation=mish\n\n"
           "[convolutional]\nsize=1\nstride=1\npad=1\nfilters=21\nactivation=logistic\n\n"
           "[yolo]\nmask=0,1,2\nanchors=4,6, 8,10, 12,9, 20,16\nclasses=2\nnum=4\n"
           "scale_x_y=2.0\nnew_coords=1\n")
    result, ours, rows, _ = _ours_and_opencv(tmp_path, cfg, [(4, 3, 3, 1), (21, 4, 1, 0)],
                                             seed=12)
    assert result.outputs == ["yolo2"]
    t = ours.blobs[result.blob_of_layer[1]].data[0].reshape(3, 7, 6, 8)
    head = ours.blobs["yolo2"].data[0].reshape(3, 7, 6, 8)
    np.testing.assert_allclose(head[:, :2], 2 * t[:, :2] - 0.5, rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(head[:, 2:], t[:, 2:])
    cells = head.transpose(2, 3, 0, 1)                       # row, column, anchor, entry
    anchors = np.array([[4, 6], [8, 10], [12, 9]], float)
    decoded = np.concatenate([
        ((np.arange(8)[None, :, None] + cells[..., 0]) / 8)[..., None],
        ((np.arange(6)[:, None, None] + cells[..., 1]) / 6)[..., None],
        (4 * cells[..., 2] ** 2 * anchors[:, 0] / 16)[..., None],
        (4 * cells[..., 3] ** 2 * anchors[:, 1] / 12)[..., None],
        cells[..., 4:5], cells[..., 5:] * cells[..., 4:5]], axis=-1).reshape(-1, 7)
    assert rows.shape == decoded.shape == (144, 7)
    np.testing.assert_allclose(decoded[:, :5], rows[:, :5], rtol=1e-4, atol=1e-5)
    kept = rows[:, 5:] > 0                  # OpenCV zeroes class scores below 0.2
    assert kept.any() and (decoded[:, 5:][~kept] <= 0.2 + 1e-5).all()
    np.testing.assert_allclose(decoded[:, 5:][kept], rows[:, 5:][kept], rtol=1e-4, atol=1e-5)
