"""ONNX import of the ops that map exactly onto Caffe layers, each as a small torch module
exported with ``torch.onnx.export``: the imported net's output against torch's own."""

import io

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import onnx as caffe_onnx

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
nn = torch.nn

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning",
                                        "ignore::UserWarning",
                                        "ignore::torch.jit.TracerWarning")


def check(module, shape, tmp_path, key, opset=17, low=-2.0, high=2.0, x=None):
    """The module exported, imported, run: its output against torch's on the same input
    (``x``, or uniform in ``[low, high)``); returns the deploy net's layer types."""
    torch.manual_seed(0)
    module = module.eval()
    if x is None:
        x = np.random.default_rng(5).uniform(low, high, shape).astype(np.float32)
    with torch.no_grad():
        want = module(torch.from_numpy(x)).numpy()
    buf = io.BytesIO()
    torch.onnx.export(module, (torch.from_numpy(x),), buf, dynamo=False, opset_version=opset,
                      input_names=["x"], output_names=["y"])
    prefix = str(tmp_path / key)
    deploy, _, outputs = caffe_onnx.to_caffe(onnx.load_from_string(buf.getvalue()), prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(x=x)
    got = net.blobs[outputs["y"]].data
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=key)
    return [lp.type for lp in deploy.layer]


@pytest.mark.parametrize("ceil", [False, True])
def test_average_pool_excluding_its_padding(tmp_path, ceil):
    # count_include_pad=False: ONNX divides border windows by their part inside the input,
    # Caffe's AVE by their part inside the padded input (it was refused)
    pool = nn.AvgPool2d((3, 2), stride=2, padding=1, ceil_mode=ceil, count_include_pad=False)
    types = check(pool, (2, 3, 7, 8), tmp_path, "avg%d" % ceil)
    assert "Pooling" in types and "Scale" in types


@pytest.mark.parametrize("kw", [dict(stride=2, padding=1, output_padding=1),
                                dict(stride=3, padding=0, output_padding=2, dilation=1),
                                dict(stride=(2, 3), padding=(2, 0), output_padding=(1, 2),
                                     groups=2)])
def test_conv_transpose_with_output_padding(tmp_path, kw):
    # output_padding was refused; the rows past the full transposed convolution are its bias
    conv = nn.ConvTranspose2d(4, 6, 3, **kw)
    types = check(conv, (2, 4, 5, 4), tmp_path, "deconv")
    assert "Deconvolution" in types


def test_conv_transpose_to_an_output_size(tmp_path):
    class Sized(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1)

        def forward(self, x):
            return self.conv(x, output_size=[10, 9])
    assert "Deconvolution" in check(Sized(), (1, 3, 5, 5), tmp_path, "sized")


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


@pytest.mark.parametrize("key,fn", [
    ("neg", lambda x: -x), ("reciprocal", lambda x: 1.0 / x),
    ("sqrt", torch.sqrt), ("pow", lambda x: x ** 3), ("rsqrt_pow", lambda x: x ** -0.5),
    ("selu", nn.SELU()),
])
def test_pointwise_power_family(tmp_path, key, fn):
    # these ops had no importer ('this op has no Caffe equivalent')
    check(Fn(fn), (2, 3, 4), tmp_path, key, low=0.5, high=3.0)


def test_min_of_tensors(tmp_path):
    # torch writes no Mean op: its case is ONNX's own (test_mean_*)
    fn = Fn(lambda x: torch.minimum(x, x * 0.5 + 0.3) - torch.minimum(x * x, -x))
    check(fn, (2, 3, 5), tmp_path, "min")


@pytest.mark.parametrize("dim", [1, -1, 0])
def test_log_softmax_shifted_by_its_maximum(tmp_path, dim):
    # a spread of 200: softmax's smallest probabilities underflow float32, ONNX's (and
    # torch's) log-softmax stays finite, and so does the conversion
    types = check(nn.LogSoftmax(dim), (2, 4, 3, 5), tmp_path, "logsoftmax", low=-100.0,
                  high=100.0)
    assert "Softmax" not in types


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_reductions_over_any_axes(tmp_path, opset):
    def fn(x):
        return torch.cat([x.sum(1), (x * x).sum(1), x.abs().sum(1), x.norm(dim=1),
                          x.mean(1), (x.sum([0, 2], keepdim=True) * x).sum(1)], 1)
    check(Fn(fn), (2, 3, 4), tmp_path, "reduce%d" % opset, opset=opset)


def test_tile_and_expand(tmp_path):
    fn = Fn(lambda x: x.repeat(1, 2, 3) + x[:, :1, :1].expand(2, 6, 12))
    check(fn, (2, 3, 4), tmp_path, "tile")


def test_instance_norm(tmp_path):
    # affine weights of their own; a channel of small variance (epsilon inside the root)
    norm = nn.InstanceNorm2d(3, affine=True, eps=1e-3)
    with torch.no_grad():
        norm.weight.copy_(torch.tensor([0.5, 2.0, -1.0]))
        norm.bias.copy_(torch.tensor([0.1, -0.3, 0.7]))

    class Small(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = norm

        def forward(self, x):
            return self.norm(x * torch.tensor([1.0, 1e-2, 1.0]).view(1, 3, 1, 1))
    check(Small(), (2, 3, 5, 4), tmp_path, "instancenorm")


@pytest.mark.parametrize("opset", [13, 18])
def test_reduce_max_and_min_over_any_axes(tmp_path, opset):
    # only ReduceMax over the spatial axes of a 4-D input converted ('a ReduceMax over axes
    # [0, 2] ... has no Caffe equivalent'); ReduceMin had no importer
    def fn(x):
        return torch.cat([x.amax(1), x.amin(1), (x * x.amax([0, 2], keepdim=True)).amin(2),
                          x.amax(-1)], 1)
    types = check(Fn(fn), (2, 3, 4), tmp_path, "extrema%d" % opset, opset=opset)
    assert "ArgMax" in types


@pytest.mark.parametrize("dim,keep", [(1, False), (-1, True), (0, True)])
def test_argmax_and_argmin_take_the_first_of_equal_values(tmp_path, dim, keep):
    # they had no importer; whole numbers in 0..2 tie often: torch (as ONNX) gives the first
    # index of equal values, Caffe's ArgMax the last
    x = np.random.default_rng(3).integers(0, 3, (3, 4, 5)).astype(np.float32)
    fn = Fn(lambda x: torch.cat([x.argmax(dim, keepdim=keep), x.argmin(dim, keepdim=keep)],
                                -1))
    types = check(fn, x.shape, tmp_path, "argmax", x=x)
    assert "ArgMax" in types


@pytest.mark.parametrize("pool", [
    nn.MaxPool1d(3, stride=2, padding=1, ceil_mode=True), nn.MaxPool1d(4, stride=3),
    nn.AvgPool1d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    nn.AvgPool1d(2, stride=2, padding=1), nn.AdaptiveAvgPool1d(1), nn.AdaptiveMaxPool1d(1)],
    ids=["max_ceil", "max_floor", "avg_exclude_pad", "avg_include_pad", "global_avg",
         "global_max"])
def test_1d_pooling(tmp_path, pool):
    # pooling of N x C x L was refused ('only 2-D pooling converts to Caffe')
    types = check(pool, (2, 3, 10), tmp_path, "pool1d")
    assert "Pooling" in types


@pytest.mark.parametrize("op,shape", [("GlobalMaxPool", (2, 3, 5)),
                                      ("GlobalAveragePool", (2, 3, 2, 3, 4))])
def test_global_pooling_of_other_ranks(tmp_path, op, shape):
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], name="pool")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(1).normal(size=shape).astype(np.float32)
    spatial = tuple(range(2, len(shape)))
    want = x.max(spatial, keepdims=True) if op == "GlobalMaxPool" else \
        x.mean(spatial, keepdims=True)
    prefix = str(tmp_path / "global")
    _, _, outputs = caffe_onnx.to_caffe(m, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(x=x)
    np.testing.assert_allclose(net.blobs[outputs["y"]].data, want, rtol=1e-5, atol=1e-6)


def test_sign(tmp_path):
    # it had no importer; zeros included (sign 0)
    x = np.random.default_rng(2).integers(-2, 3, (2, 3, 5)).astype(np.float32) * 0.75
    assert (x == 0).any() and (x > 0).any() and (x < 0).any()
    types = check(Fn(torch.sign), x.shape, tmp_path, "sign", x=x)
    assert "Threshold" in types


@pytest.mark.parametrize("opset,axis", [(11, 1), (11, 2), (13, 1), (13, 0)])
def test_hardmax_marks_the_first_maximum(tmp_path, opset, axis):
    # it had no importer (torch has no Hardmax: the reference is NumPy's argmax, whose first
    # index of equal values is ONNX's); before opset 13 the axes from `axis` on are one
    from onnx import TensorProto, helper
    shape = (2, 3, 4)
    graph = helper.make_graph(
        [helper.make_node("Hardmax", ["x"], ["y"], name="hardmax", axis=axis)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    x = np.random.default_rng(4).integers(0, 3, shape).astype(np.float32)
    if opset < 13:
        flat = x.reshape(int(np.prod(shape[:axis])), -1)
        want = np.eye(flat.shape[1], dtype=np.float32)[flat.argmax(1)].reshape(shape)
    else:
        moved = np.moveaxis(x, axis, -1)
        want = np.moveaxis(np.eye(shape[axis], dtype=np.float32)[moved.argmax(-1)], -1, axis)
    prefix = str(tmp_path / "hardmax")
    _, _, outputs = caffe_onnx.to_caffe(m, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(x=x)
    np.testing.assert_array_equal(net.blobs[outputs["y"]].data, want)


def test_add_and_sub_of_tensors_that_broadcast(tmp_path):
    # refused ('Add of two tensors converts only as Add/Sub/Mul of equal shapes'): one side
    # broadcast, the other or both
    fn = Fn(lambda x: (x + x[0]) - x[:, :, :1] + (x[:, :1, :] - x[:, :, 1:2]))
    types = check(fn, (2, 3, 4), tmp_path, "bcast")
    assert "Tile" in types and "Eltwise" in types


@pytest.mark.parametrize("slope_shape,opset", [((4,), 16), ((3, 1), 16), ((2, 3, 4), 16),
                                               ((1, 1, 4), 16), ((3,), 6)])
def test_prelu_of_slopes_that_are_not_per_channel(tmp_path, slope_shape, opset):
    # slopes ONNX aligns with the last axes were refused ('are not per channel'), as were C
    # slopes before opset 7, which are one per channel there; torch's PReLU writes one slope
    # per channel only, so the graph is made here and NumPy's max(0, x) + slope min(0, x)
    # is the reference
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(6)
    slope = rng.uniform(-1.0, 1.0, slope_shape).astype(np.float32)
    ref = slope.reshape(3, 1) if opset < 7 else slope
    graph = helper.make_graph(
        [helper.make_node("PRelu", ["x", "slope"], ["y"], name="prelu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(slope, "slope")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    x = rng.normal(size=(2, 3, 4)).astype(np.float32)
    x[0, 0, 0] = 0.0
    want = np.maximum(x, 0) + ref * np.minimum(x, 0)
    prefix = str(tmp_path / "prelu")
    _, _, outputs = caffe_onnx.to_caffe(m, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(x=x)
    np.testing.assert_array_equal(net.blobs[outputs["y"]].data, want)


class Gemm(nn.Module):
    """``alpha x' W + beta C``, through torch.addmm (exported as Gemm) of x transposed."""

    def __init__(self, c_shape, transposed):
        super().__init__()
        gen = torch.Generator().manual_seed(7)
        self.w = nn.Parameter(torch.randn(3, 4, generator=gen))
        self.c = nn.Parameter(torch.randn(*c_shape, generator=gen))
        self.transposed = transposed

    def forward(self, x):
        a = x.t() if self.transposed else x
        return torch.addmm(self.c, a, self.w, beta=0.5, alpha=2.0)


@pytest.mark.parametrize("c_shape,transposed", [((5, 4), True), ((5, 1), False),
                                                ((4,), True)])
def test_gemm_of_a_transposed_or_a_matrix_bias(tmp_path, c_shape, transposed):
    # transA ('transA has no Caffe equivalent') and a C of several rows ('C of shape (5, 4)
    # is not a per-output bias') were refused
    shape = (3, 5) if transposed else (5, 3)
    types = check(Gemm(c_shape, transposed), shape, tmp_path, "gemm")
    assert "InnerProduct" in types


@pytest.mark.parametrize("op,shape,kw", [
    ("MaxPool", (2, 3, 7, 6), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[0, 1, 2, 0])),
    ("AveragePool", (2, 3, 7, 6), dict(kernel_shape=[3, 3], strides=[2, 1], pads=[1, 0, 0, 2])),
    ("AveragePool", (1, 2, 5, 5), dict(kernel_shape=[2, 2], auto_pad="SAME_UPPER")),
    ("MaxPool", (2, 3, 9), dict(kernel_shape=[3], strides=[2], pads=[0, 2])),
])
def test_pools_of_uneven_pads(tmp_path, op, shape, kw):
    # begin and end pads that differ were refused ('ONNX pools [..] windows where Caffe's
    # rounding gives [..]'); onnxruntime is the reference
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], name="pool", **kw)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(8).normal(size=shape).astype(np.float32)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x})[0]
    prefix = str(tmp_path / "uneven")
    _, _, outputs = caffe_onnx.to_caffe(m, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(x=x)
    got = net.blobs[outputs["y"]].data
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
