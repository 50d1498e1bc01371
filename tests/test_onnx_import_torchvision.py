"""ONNX import of the patterns torchvision's classification and segmentation models export
(MobileNetV3's hard activations, the squeeze-excitation gate of MobileNetV3, EfficientNet,
MnasNet and RegNetY, ShuffleNetV2's channel shuffle and mean, the segmentation heads'
bilinear upsampling): each pattern as a small torch module written here, exported with
``torch.onnx.export`` at the opsets users pick, its imported net against onnxruntime on the
same model (and OpenCV's Caffe importer, which runs every layer these become); the ops with
no Caffe form are errors naming the node and its op."""

import io

import numpy as np
import pytest

from helpers.onnx_runtime import assert_close, run_ort
import pycaffe_lite as caffe
from pycaffe_lite import onnx as caffe_onnx
from pycaffe_lite.errors import CaffeError
from test_onnx_import import convert_and_compare  # skips where onnx is absent

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
F = torch.nn.functional
nn = torch.nn
OPSETS = (13, 17)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore::UserWarning",
                                        "ignore::torch.jit.TracerWarning")


class Lambda(nn.Module):
    def __init__(self, fn, channels):
        super().__init__()
        self.fn = fn
        self.conv = nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        return self.fn(self.conv(x))


def export(module, shape, opset):
    torch.manual_seed(0)
    buf = io.BytesIO()
    torch.onnx.export(module.eval(), (torch.zeros(*shape),), buf, dynamo=False,
                      opset_version=opset, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    return onnx.load_from_string(buf.getvalue())


def ops(model):
    return [n.op_type for n in model.graph.node]


def types(deploy):
    return [lp.type for lp in deploy.layer]


def compare_batch(model, tmp_path, key, shape):
    """The model imported at a batch of ``shape[0]`` against onnxruntime at that batch."""
    x = np.random.default_rng(3).uniform(-4, 4, shape).astype(np.float32)
    theirs = run_ort(model, {"x": x})["y"]
    prefix = str(tmp_path / key)
    deploy, _, outputs = caffe_onnx.to_caffe(model, prefix, input_shapes={"x": shape})
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(x=x)
    assert_close(net.blobs[outputs["y"]].data, theirs, key)
    return deploy


# -- HardSigmoid, HardSwish ----------------------------------------------------------------
@pytest.mark.parametrize("opset", OPSETS)
def test_hard_sigmoid_and_hard_swish(tmp_path, opset):
    # MobileNetV3: opset 13 writes hardswish as HardSigmoid then Mul, 17 as HardSwish
    module = Lambda(lambda x: F.hardswish(F.hardsigmoid(x * 4) * 8 - 4) * 2, 3)
    model = export(module, (1, 3, 6, 5), opset)
    assert ("HardSwish" in ops(model)) == (opset >= 14) and "HardSigmoid" in ops(model)
    deploy, _ = convert_and_compare(model, tmp_path, "hard%d" % opset)
    assert "ReLU6" in types(deploy) and "HardSigmoid" not in types(deploy)


def test_hard_sigmoid_of_other_slopes_matches_its_definition(tmp_path):
    # ONNX's own default alpha 0.2 and beta 0.5, and others: max(0, min(1, alpha x + beta))
    from onnx import TensorProto, helper
    nodes = [helper.make_node("HardSigmoid", ["x"], ["h"], name="hs_default"),
             helper.make_node("HardSigmoid", ["h"], ["y"], name="hs_custom", alpha=-1.5,
                              beta=0.75)]
    graph = helper.make_graph(nodes, "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                             [1, 2, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                             [1, 2, 5, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.linspace(-6, 6, 50, dtype=np.float32).reshape(1, 2, 5, 5)
    hand = np.clip(-1.5 * np.clip(0.2 * x + 0.5, 0, 1) + 0.75, 0, 1)
    prefix = str(tmp_path / "hs")
    _, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(x=x)
    assert_close(net.blobs[outputs["y"]].data, hand, "HardSigmoid")
    assert_close(run_ort(model, {"x": x})["y"], hand, "HardSigmoid (onnxruntime)")


# -- the squeeze-excitation gate -----------------------------------------------------------
class SqueezeExcitation(nn.Module):
    """EfficientNet's / MnasNet's block: SiLU, the gate from a global mean (pooled or
    ``mean([2, 3], keepdim=True)``), ``x * s`` (or ``s * x``)."""

    def __init__(self, channels=4, pooled=True, gate_first=False):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1)
        self.fc1 = nn.Conv2d(channels, 2, 1)
        self.fc2 = nn.Conv2d(2, channels, 1)
        self.pooled, self.gate_first = pooled, gate_first

    def forward(self, x):
        x = F.silu(self.conv(x))
        s = F.adaptive_avg_pool2d(x, 1) if self.pooled else x.mean((2, 3), keepdim=True)
        s = torch.sigmoid(self.fc2(F.relu(self.fc1(s))))
        return s * x if self.gate_first else x * s


@pytest.mark.parametrize("opset", OPSETS)
@pytest.mark.parametrize("pooled, gate_first", [(True, False), (False, True)])
def test_squeeze_excitation_gate_becomes_scale_with_two_bottoms(tmp_path, opset, pooled,
                                                                 gate_first):
    model = export(SqueezeExcitation(pooled=pooled, gate_first=gate_first), (1, 4, 5, 6),
                   opset)
    key = "se%d%d%d" % (opset, pooled, gate_first)
    deploy, _ = convert_and_compare(model, tmp_path, key)
    scale = [lp for lp in deploy.layer if lp.type == "Scale"]
    assert len(scale) == 1 and len(scale[0].bottom) == 2 and scale[0].scale_param.axis == 0
    # and per sample at a batch of 3
    compare_batch(model, tmp_path, key + "b", (3, 4, 5, 6))


def test_a_mul_broadcast_both_ways(tmp_path):
    # (1, 3, 1, 5) * (1, 1, 4, 1): each side tiled to the output, then Eltwise PROD (it was
    # refused: 'a Mul of tensors of shapes (1, 3, 1, 5) and (1, 1, 4, 1)')
    module = Lambda(lambda x: x[:, :, :1, :] * x[:, :1, :, :1], 3)
    model = export(module, (1, 3, 4, 5), 13)
    deploy = compare_batch(model, tmp_path, "mul", (1, 3, 4, 5))
    assert "Eltwise" in types(deploy)
    compare_batch(model, tmp_path, "mul3", (3, 3, 4, 5))


# -- ReduceMean / ReduceMax ----------------------------------------------------------------
@pytest.mark.parametrize("opset", OPSETS + (18,))
def test_mean_and_max_over_the_spatial_axes_become_global_pooling(tmp_path, opset):
    # MnasNet's and ShuffleNetV2's head: x.mean([2, 3]); keepdim and amax too (opset 18
    # moves the axes to an input)
    module = Lambda(lambda x: torch.cat([x.mean([2, 3]), x.amax((-1, -2)),
                                         x.mean((3, 2), keepdim=True).flatten(1) * 3], 1), 4)
    model = export(module, (1, 4, 5, 7), opset)
    assert "ReduceMean" in ops(model) and "ReduceMax" in ops(model)
    deploy, _ = convert_and_compare(model, tmp_path, "mean%d" % opset)
    assert types(deploy).count("Pooling") == 3
    compare_batch(model, tmp_path, "mean%db" % opset, (2, 4, 5, 7))


def test_mean_over_trailing_axes_becomes_reduction(tmp_path):
    module = Lambda(lambda x: torch.cat([x.reshape(x.shape[0], 4, -1).mean(-1, keepdim=True),
                                         x.mean((1, 2, 3)).reshape(-1, 1, 1)], 1), 4)
    deploy, _ = convert_and_compare(export(module, (1, 4, 3, 5), 13), tmp_path, "red",
                                    opencv=False)  # OpenCV's Caffe importer has no Reduction
    assert types(deploy).count("Reduction") == 2


def test_a_mean_over_leading_axes_is_permuted_to_the_end(tmp_path):
    # it was refused ('a ReduceMean over axes [1] of a 4-D input has no Caffe equivalent')
    model = export(Lambda(lambda x: x.mean(1), 4), (1, 4, 3, 5), 13)
    deploy, _ = convert_and_compare(model, tmp_path, "lead", opencv=False)
    assert types(deploy)[-2:] == ["Permute", "Reduction"]


# -- ShuffleNetV2's block ------------------------------------------------------------------
class Shuffle(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 4, 1)

    def forward(self, x):
        a, b = x.chunk(2, dim=1)
        x = torch.cat((a, F.relu(self.conv(x))), 1)
        n, c, h, w = x.shape
        x = x.view(n, 2, c // 2, h, w).transpose(1, 2).contiguous().view(n, c, h, w)
        return x.mean([2, 3]) + torch.cat([b.mean([2, 3])] * 2, 1)


@pytest.mark.parametrize("opset", OPSETS)
def test_channel_shuffle_and_mean(tmp_path, opset):
    model = export(Shuffle(), (1, 8, 4, 3), opset)
    deploy, _ = convert_and_compare(model, tmp_path, "shuffle%d" % opset)
    assert [list(lp.permute_param.order) for lp in deploy.layer
            if lp.type == "Permute"] == [[0, 2, 1, 3, 4]]


# -- Gather of constant indices ------------------------------------------------------------
@pytest.mark.parametrize("opset", OPSETS)
def test_gather_of_constant_indices(tmp_path, opset):
    index = torch.tensor([3, 0, 3])
    module = Lambda(lambda x: torch.cat([x[:, 1], x[:, -1], x[:, :, 2], x.index_select(1, index)
                                         .flatten(1, 2)], 1), 4)
    model = export(module, (1, 4, 3, 3), opset)
    assert ops(model).count("Gather") == 4
    deploy, _ = convert_and_compare(model, tmp_path, "gather%d" % opset)
    assert "Gather" not in types(deploy)
    compare_batch(model, tmp_path, "gather%db" % opset, (2, 4, 3, 3))


# -- bilinear upsampling with align_corners=False -------------------------------------------
@pytest.mark.parametrize("opset", (11,) + OPSETS)
def test_half_pixel_bilinear_upsampling_by_integer_factors(tmp_path, opset):
    # the segmentation heads' F.interpolate(..., mode="bilinear", align_corners=False): by
    # 2, by (3, 4) to a size, from 2 x 1 and from 1 x 1 (DeepLabV3's image pooling)
    def fn(x):
        y = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)
        z = F.interpolate(y, size=(y.shape[2] * 3, y.shape[3] * 4), mode="bilinear",
                          align_corners=False)
        p = F.interpolate(x[:, :, :2, :1], size=(6, 5), mode="bilinear", align_corners=False)
        q = F.interpolate(F.adaptive_avg_pool2d(x, 1), size=(6, 5), mode="bilinear",
                          align_corners=False)
        return z[:, :, :6, :5] + p + q

    model = export(Lambda(fn, 3), (1, 3, 4, 3), opset)
    assert "Resize" in ops(model)
    deploy, _ = convert_and_compare(model, tmp_path, "bil%d" % opset)
    deconv = [lp for lp in deploy.layer if lp.type == "Deconvolution"]
    assert len(deconv) == 4 and all(lp.param[0].lr_mult == 0 for lp in deconv)


def test_half_pixel_bilinear_weights_by_hand(tmp_path):
    # a 1 x 3 row upsampled by 2 along W (half-pixel, clamped at the edges), by hand:
    # output j reads input x = (j + 0.5) / 2 - 0.5
    row = np.array([1.0, 5.0, -3.0], np.float32)
    expected = [1.0, 2.0, 4.0, 3.0, -1.0, -3.0]
    model = export(nn.Upsample(scale_factor=(1, 2), mode="bilinear"), (1, 1, 1, 3), 13)
    prefix = str(tmp_path / "row")
    _, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(x=row.reshape(1, 1, 1, 3))
    assert_close(net.blobs[outputs["y"]].data.reshape(-1), np.float32(expected), "row")


def test_half_pixel_bilinear_by_a_fraction_names_the_node():
    module = Lambda(lambda x: F.interpolate(x, scale_factor=1.5, mode="bilinear"), 3)
    model = export(module, (1, 3, 4, 4), 13)
    node = [n for n in model.graph.node if n.op_type == "Resize"][0]
    with pytest.raises(CaffeError, match="ONNX node '%s' \\(op Resize\\): bilinear resize "
                                         "with coordinate_transformation_mode "
                                         "(pytorch_)?half_pixel .* converts only as an "
                                         "upsampling by integer factors" % node.name):
        caffe_onnx.to_caffe(model, None)


# -- ops with no Caffe form ----------------------------------------------------------------
@pytest.mark.parametrize("module, opset, op", [
    (Lambda(torch.floor, 2), 13, "Floor"),
    (Lambda(lambda x: torch.erf(x) * 3, 2), 17, "Erf"),  # an Erf outside GELU's subgraph
])
def test_ops_without_a_caffe_form_name_the_node_and_op(module, opset, op):
    model = export(module, (1, 2, 2, 3), opset)
    node = [n for n in model.graph.node if n.op_type == op][0]
    with pytest.raises(CaffeError, match="ONNX node '%s' \\(op %s\\): " % (node.name, op)):
        caffe_onnx.to_caffe(model, None)


@pytest.mark.parametrize("opset", [13, 17])
def test_gelu_before_opset_20(tmp_path, opset):
    # written 0.5 * x * (1 + erf(x / sqrt(2))): it was refused at the Erf; one GELU layer now
    model = export(nn.GELU(), (1, 2, 2, 3), opset)
    assert "Erf" in ops(model)
    deploy = compare_batch(model, tmp_path, "gelu%d" % opset, (2, 2, 2, 3))
    assert types(deploy) == ["Input", "GELU"]


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_at_opset_20(tmp_path, approximate):
    # opset 20's Gelu: it was refused ('this op has no Caffe equivalent')
    model = export(nn.GELU(approximate=approximate), (1, 2, 2, 3), 20)
    assert "Gelu" in ops(model)
    compare_batch(model, tmp_path, "gelu", (2, 2, 2, 3))


@pytest.mark.parametrize("opset", [17, 13])
def test_layer_norm(tmp_path, opset):
    # opset 17's LayerNormalization, and opset 13's ReduceMean, Sub, Pow, Div, Sqrt, ...: both
    # were refused (no LayerNormalization; a Div of two tensors)
    norm = nn.LayerNorm(6)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
        norm.bias.uniform_(-1, 1)
    model = export(nn.Sequential(nn.Flatten(2), norm), (1, 2, 2, 3), opset)
    compare_batch(model, tmp_path, "ln%d" % opset, (1, 2, 2, 3))
    compare_batch(model, tmp_path, "ln%db" % opset, (3, 2, 2, 3))


def test_multihead_attention(tmp_path):
    # MatMuls of computed tensors (Q K', then by V), softmax and the projections: it was
    # refused ('only a MatMul by a constant 2-D matrix converts')
    torch.manual_seed(0)
    attention = nn.MultiheadAttention(4, 2, batch_first=True).eval()
    buf = io.BytesIO()
    x = torch.zeros(1, 5, 4)
    torch.onnx.export(attention, (x, x, x), buf, dynamo=False, opset_version=17,
                      input_names=["q", "k", "v"], output_names=["y", "weights"])
    model = onnx.load_from_string(buf.getvalue())
    rng = np.random.default_rng(8)
    feed = {n: rng.normal(size=(1, 5, 4)).astype(np.float32) for n in ("q", "k", "v")}
    theirs = run_ort(model, feed)
    prefix = str(tmp_path / "mha")
    _, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(**feed)
    for name in ("y", "weights"):
        assert_close(net.blobs[outputs[name]].data, theirs[name], name)
