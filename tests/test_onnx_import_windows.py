"""ONNX pooling that Caffe's 2-D Pooling layer cannot hold: dilated MaxPool / AveragePool of
1 to 3 spatial axes and undilated 3-D pooling, built from the windows' offsets (strided
selections and Eltwise). Checked against onnxruntime on random shapes, geometry and values.

Tolerances: a maximum is a copy of one input value, so MaxPool must agree exactly
(infinities included; a window holding only -inf gives -inf, where onnxruntime's 3-D pool
gives its starting value -FLT_MAX). An average is a sum in another order than onnxruntime's, then a
product by the fixed ``1 / count`` (one more rounding than a division): a few float32 units
in the last place, well inside ``rtol=1e-5`` for values of one sign's magnitude up to 1."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import onnx as caffe_onnx
from pycaffe_lite.errors import CaffeError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402


def _model(node, shape, opset=19):
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in node.output])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _both(model, x, tmp_path, key):
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    prefix = str(tmp_path / key)
    deploy, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(x=x)
    return net.blobs[outputs["y"]].data.copy(), want, deploy


def _geometry(rng, spatial, dilated):
    kernel = [int(k) for k in rng.integers(1, 4, spatial)]
    dil = [int(d) for d in rng.integers(1, 4, spatial)] if dilated else [1] * spatial
    strides = [int(s) for s in rng.integers(1, 4, spatial)]
    pads = [int(rng.integers(0, k)) for k in kernel] * 2
    sizes = [int(rng.integers((k - 1) * d + 1, (k - 1) * d + 8)) for k, d in zip(kernel, dil)]
    return kernel, dil, strides, pads, sizes


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_dilated_and_3d_pools_against_onnxruntime(tmp_path, op, seed):
    rng = np.random.default_rng(seed + (100 if op == "AveragePool" else 0))
    spatial = [1, 2, 3][seed % 3]
    dilated = seed % 4 != 3 or spatial < 3  # every 4th 3-D case undilated
    kernel, dil, strides, pads, sizes = _geometry(rng, spatial, dilated)
    extra = {"ceil_mode": int(rng.integers(0, 2))}
    if op == "AveragePool":
        extra["count_include_pad"] = int(rng.integers(0, 2))
    node = helper.make_node(op, ["x"], ["y"], name="pool", kernel_shape=kernel, strides=strides,
                            pads=pads, dilations=dil, **extra)
    shape = [int(rng.integers(1, 3)), int(rng.integers(1, 4))] + sizes
    x = rng.normal(size=shape).astype(np.float32)
    if op == "MaxPool":
        x.reshape(-1)[::7] = -np.inf  # a window may hold only -inf: its maximum is -inf
        x.reshape(-1)[3::11] = np.inf
    got, want, deploy = _both(_model(node, shape), x, tmp_path, "p%d" % seed)
    if spatial == 3 or max(dil) > 1:  # not Caffe's Pooling, which is 2-D, undilated
        assert "Pooling" not in [lp.type for lp in deploy.layer]
    assert got.shape == want.shape
    if op == "MaxPool":
        # a window of -inf alone: its maximum is -inf; onnxruntime's 3-D pool starts from
        # -FLT_MAX and gives that (as Caffe's own Pooling would)
        lowest = np.finfo(np.float32).min
        np.testing.assert_array_equal(got, np.where((want == lowest) & (got == -np.inf),
                                                    -np.inf, want))
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_the_pytorch_dilated_maxpool(tmp_path):
    # nn.MaxPool2d(3, stride=2, padding=1, dilation=2), as torch exports it: it was refused
    # ('dilated pooling / storage_order have no Caffe equivalent')
    torch = pytest.importorskip("torch")
    import io
    module = torch.nn.MaxPool2d(3, stride=2, padding=1, dilation=2).eval()
    x = torch.from_numpy(np.random.default_rng(5).normal(size=(2, 3, 11, 9)).astype(np.float32))
    buf = io.BytesIO()
    torch.onnx.export(module, (x,), buf, opset_version=17, dynamo=False,
                      input_names=["x"], output_names=["y"])
    model = onnx.load_from_string(buf.getvalue())
    got, want, _ = _both(model, x.numpy(), tmp_path, "torch")
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, module(x).numpy())


def test_a_read_indices_output_is_still_refused():
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], name="pool", kernel_shape=[2, 2, 2],
                            dilations=[2, 1, 1])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 5, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    with pytest.raises(CaffeError, match=r"ONNX node 'pool' \(op MaxPool\): its Indices output "
                                         r"'i' is read, and has no Caffe equivalent"):
        caffe_onnx.to_caffe(model, None)


@pytest.mark.parametrize("seed", range(6))
def test_lp_pool(tmp_path, seed):
    # LpPool was refused ('this op has no Caffe equivalent'): the windows' sum of |x|^p, then a
    # Power 1/p; sums in another order than onnxruntime's and a root: rtol 1e-5
    rng = np.random.default_rng(200 + seed)
    spatial = [1, 2, 3][seed % 3]
    kernel, dil, strides, pads, sizes = _geometry(rng, spatial, seed % 2 == 1)
    p = [1, 2, 3][seed % 3]
    node = helper.make_node("LpPool", ["x"], ["y"], name="lp", kernel_shape=kernel,
                            strides=strides, pads=pads, dilations=dil, p=p)
    shape = [int(rng.integers(1, 3)), int(rng.integers(1, 4))] + sizes
    x = rng.normal(size=shape).astype(np.float32)
    got, want, deploy = _both(_model(node, shape, opset=22), x, tmp_path, "lp%d" % seed)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _with_indices(kernel, strides, pads, shape, **extra):
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], name="pool", kernel_shape=kernel,
                            strides=strides, pads=pads, **extra)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])


@pytest.mark.parametrize("kernel,strides,pads,shape", [
    ([3, 3], [2, 2], [1, 1, 1, 1], (2, 3, 7, 7)), ([2, 2], [2, 2], [0, 0, 0, 0], (1, 2, 6, 8)),
    ([3, 2], [1, 2], [1, 0, 1, 0], (3, 2, 5, 6)), ([3], [2], [1, 1], (2, 3, 9))])
def test_maxpool_indices(tmp_path, kernel, strides, pads, shape):
    # a read Indices output was refused: Caffe's MAX mask (h W + w in the plane) plus the
    # plane's offset (n C + c) H W is ONNX's flat index; with ties (small integers) the first
    # maximum in row-major order, as onnxruntime's
    model = _with_indices(kernel, strides, pads, shape)
    rng = np.random.default_rng(len(shape) + kernel[0])
    for x in (rng.normal(size=shape).astype(np.float32),
              rng.integers(-2, 3, shape).astype(np.float32)):
        want = ort.InferenceSession(model.SerializeToString(),
                                    providers=["CPUExecutionProvider"]).run(None, {"x": x})
        prefix = str(tmp_path / "idx")
        _, _, outputs = caffe_onnx.to_caffe(model, prefix)
        net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
        net.forward(x=x)
        np.testing.assert_array_equal(net.blobs[outputs["y"]].data, want[0])
        np.testing.assert_array_equal(net.blobs[outputs["i"]].data.astype(np.int64), want[1])


def test_maxpool_indices_that_do_not_convert():
    with pytest.raises(CaffeError, match=r"ONNX node 'pool' \(op MaxPool\): its Indices output "
                                         r"'i' is read, and converts only in row-major order"):
        caffe_onnx.to_caffe(_with_indices([2, 2], [1, 1], [0, 0, 0, 0], (1, 1, 4, 4),
                                          storage_order=1), None)
    # floor mode, where Caffe's rounding up adds a window: its mask would need cropping too
    with pytest.raises(CaffeError, match=r"ONNX node 'pool' \(op MaxPool\): its Indices output "
                                         r"'i' is read, and converts only where Caffe's windows "
                                         r"are ONNX's \(\[2, 2\], not \[3, 3\]\)"):
        caffe_onnx.to_caffe(_with_indices([2, 2], [2, 2], [0, 0, 0, 0], (1, 1, 5, 5)), None)


def test_a_padded_maxpools_minus_infinity_loads_without_a_divergence_warning(tmp_path, caplog):
    # the padding of a max pooling built from its windows is a Parameter layer (lr_mult 0)
    # holding -inf: loading the weights warned that they came from a run that diverged
    node = helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1], dilations=[2, 2])
    x = np.random.default_rng(3).normal(size=(1, 2, 7, 7)).astype(np.float32)
    with caplog.at_level("WARNING"):
        got, want, deploy = _both(_model(node, x.shape), x, tmp_path, "padded")
    assert any(lp.type == "Parameter" for lp in deploy.layer)
    np.testing.assert_array_equal(got, want)
    assert "NaN or infinite" not in caplog.text
