"""ONNX import of the ops PyTorch writes for resizing, axis orders and slicing
(``F.interpolate``, ``permute``, ``chunk``, ``x[:, :c]``): small torch modules exported at the
opsets the importer reads, their imported nets against onnxruntime on the same model (and
OpenCV's Caffe importer where it has the layer); the forms Caffe has no exact layer for are
errors naming the node and its op."""

import io

import pytest

from pycaffe_lite import onnx as caffe_onnx
from pycaffe_lite.errors import CaffeError
from test_onnx_import import convert_and_compare  # skips where onnx is absent

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
F = torch.nn.functional
OPSETS = (11, 13, 17)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore::UserWarning")


class Lambda(torch.nn.Module):
    def __init__(self, fn, channels=3):
        super().__init__()
        self.fn = fn
        self.conv = torch.nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        return self.fn(self.conv(x))


def export(fn, shape, opset, channels=None):
    torch.manual_seed(0)
    buf = io.BytesIO()
    torch.onnx.export(Lambda(fn, channels or shape[1]).eval(), (torch.zeros(*shape),), buf,
                      dynamo=False, opset_version=opset, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    return onnx.load_from_string(buf.getvalue())


def types(deploy):
    return [lp.type for lp in deploy.layer]


# -- Resize / Upsample ---------------------------------------------------------------------
@pytest.mark.parametrize("opset", (9, 10) + OPSETS)
def test_nearest_upsampling_by_integer_factors(tmp_path, opset):
    # nn.Upsample(scale_factor=2) and F.interpolate(size=...) by (3, 2) (Upsample before
    # opset 10, Resize from 10): a Deconvolution with one group per channel and fixed weights
    # of 1, which OpenCV runs too
    def fn(x):
        y = F.interpolate(x, scale_factor=2, mode="nearest")
        return F.interpolate(y, size=(y.shape[2] * 3, y.shape[3] * 2), mode="nearest")

    deploy, _ = convert_and_compare(export(fn, (1, 3, 3, 4), opset), tmp_path, "near%d" % opset)
    deconv = [lp for lp in deploy.layer if lp.type == "Deconvolution"]
    assert len(deconv) == 2 and "Resize" not in types(deploy)
    assert deconv[1].convolution_param.kernel_h == 3 and deconv[1].param[0].lr_mult == 0


@pytest.mark.parametrize("opset", OPSETS)
def test_bilinear_with_corners_aligned_becomes_interp(tmp_path, opset):
    def fn(x):
        y = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
        return F.interpolate(y, size=(5, 7), mode="bilinear", align_corners=True)

    deploy, _ = convert_and_compare(export(fn, (1, 3, 4, 3), opset), tmp_path, "bil%d" % opset)
    interp = [lp.interp_param for lp in deploy.layer if lp.type == "Interp"]
    assert [(p.height, p.width) for p in interp] == [(8, 6), (5, 7)]


@pytest.mark.parametrize("fn, why", [
    (lambda x: F.interpolate(x, size=(5, 4), mode="bilinear", align_corners=False),
     "bilinear resize with coordinate_transformation_mode (pytorch_)?half_pixel "
     "\\(F.interpolate's align_corners=False\\) converts only as an upsampling by integer "
     "factors"),
    (lambda x: F.interpolate(x, scale_factor=2, mode="bicubic", align_corners=False),
     "cubic resize does not convert: Caffe has no cubic interpolation layer"),
    (lambda x: F.interpolate(x, size=(5, 5), mode="nearest"),
     "nearest resize converts only by integer factors"),
])
def test_resizes_without_an_exact_layer_name_the_node(fn, why):
    model = export(fn, (1, 3, 3, 3), 13)
    node = [n for n in model.graph.node if n.op_type == "Resize"][0]
    with pytest.raises(CaffeError, match="ONNX node '%s' \\(op Resize\\): %s"
                                         % (node.name, why)):
        caffe_onnx.to_caffe(model, None)


# -- Transpose -----------------------------------------------------------------------------
@pytest.mark.parametrize("opset", OPSETS)
def test_transpose_becomes_permute(tmp_path, opset):
    # SSD's heads: NCHW -> NHWC, then flattened; and a 3-D transpose after it
    def fn(x):
        y = x.permute(0, 2, 3, 1).reshape(x.shape[0], -1, 2)
        return torch.relu(y.transpose(1, 2))

    deploy, _ = convert_and_compare(export(fn, (1, 4, 3, 5), opset), tmp_path, "perm%d" % opset)
    orders = [list(lp.permute_param.order) for lp in deploy.layer if lp.type == "Permute"]
    assert orders == [[0, 2, 3, 1], [0, 2, 1]]


def test_softmax_over_channels_before_opset_13(tmp_path):
    # opset 11 writes softmax(dim=1) of a 4-D tensor as Transpose, Softmax, Transpose
    model = export(lambda x: torch.softmax(x, 1), (1, 4, 3, 2), 11)
    assert [n.op_type for n in model.graph.node][-3:] == ["Transpose", "Softmax", "Transpose"]
    deploy, _ = convert_and_compare(model, tmp_path, "softmax11")
    assert types(deploy)[-3:] == ["Permute", "Softmax", "Permute"]


# -- Slice ---------------------------------------------------------------------------------
@pytest.mark.parametrize("opset", (9,) + OPSETS)
def test_slices_with_a_step_of_one(tmp_path, opset):
    # torch.chunk (bounds computed from the shape, folded), x[:, :c], and two axes at once
    # (a layer after each: the harness names OpenCV's outputs by their layers' first tops)
    def fn(x):
        a, b = torch.chunk(x, 2, 1)
        return torch.cat([a * 2, b, x[:, :1], x[:, -3:-2]], 1) + 1, torch.relu(x[:, 1:, 1:-1])

    model = export(fn, (1, 4, 4, 5), opset)
    assert [n.op_type for n in model.graph.node].count("Slice") >= 4
    deploy, net = convert_and_compare(model, tmp_path, "slice%d" % opset)
    points = [list(lp.slice_param.slice_point) for lp in deploy.layer if lp.type == "Slice"]
    # chunk (one Slice each from opset 11, one Split before), :1, -3:-2, then 1: and 1:-1
    assert points == [[2]] * (2 if opset >= 11 else 1) + [[1], [1, 2], [1], [1, 3]]


@pytest.mark.parametrize("opset", OPSETS)
def test_slices_with_other_steps(tmp_path, opset):
    # x[:, ::2] and x.flip(2) (a step of -1): a Reshape and a Slice of the first of each two
    # channels; single rows concatenated in reverse order (these were refused: 'steps [2]:
    # only a step of 1 converts'); OpenCV runs the layers too
    model = export(lambda x: torch.cat([x[:, ::2], x.flip(2)[:, :2]], 1), (1, 4, 3, 3), opset)
    assert "Slice" in [n.op_type for n in model.graph.node]
    deploy, _ = convert_and_compare(model, tmp_path, "steps%d" % opset)
    assert "Reshape" in types(deploy)
