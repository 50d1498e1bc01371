"""Cases from NVCaffe's and Intel Caffe's own C++ tests that check what those forks do
differently from BVLC Caffe: the fork's inputs and expected values as data, each check naming
the case it comes from, the expected values worked out by hand (or by a NumPy formula)."""

import numpy as np
import pytest

from pycaffe_lite.data.transformer import nvcaffe_resized_size
from pycaffe_lite.proto import caffe_pb2


def transform_param(**fields):
    p = caffe_pb2.TransformationParameter()
    for name, value in fields.items():
        setattr(p, name, value)
    return p


# ---- NVCaffe: DataTransformer::image_random_resize ----------------------------------------
def test_random_resize_of_a_4_by_5_image_to_2():
    # NVCaffe test_data_transformer.cpp TestVarSzImgRandomResize: a 4 x 5 image,
    # img_rand_resize_lower = upper = 2: the shorter side 4 -> 2, the other 5 * 2 / 4 = 2.5,
    # rounded half away from zero (std::lround): 2 x 3
    p = transform_param(img_rand_resize_lower=2, img_rand_resize_upper=2)
    assert nvcaffe_resized_size(p, 4, 5, None) == (2, 3)


@pytest.mark.parametrize("h, w, size, expected", [
    # 123 / 480 then times 720 in float32 is 184.5 -> 185 (float64: 184.49999999999997 ->
    # 184)
    (480, 720, 123, (123, 185)),
    # 133 / 360 in float32 is 0.36944443; times 540 is 199.49998 -> 199 (float64: 200)
    (360, 540, 133, (133, 199)),
    # 25 / 6 in float32 is 4.1666665; times 15 is 62.499996 -> 62 (float64: 63)
    (6, 15, 25, (25, 62)),
])
def test_random_resize_sides_are_float32_products(h, w, size, expected):
    # NVCaffe data_transformer.cpp image_random_resize: ``const float scale = new_size /
    # img_height`` and ``float new_fwidth = scale * img_width``, then std::lround of the float
    p = transform_param(img_rand_resize_lower=size, img_rand_resize_upper=size,
                        allow_upscale=True)
    assert nvcaffe_resized_size(p, h, w, None) == expected
    # the same products by hand in float32
    f = np.float32
    assert int(np.floor(f(size) / f(h) * f(w) + f(0.5))) == expected[1]


# ---- the forks' options that are not run here: a text file using one names the fork ------
@pytest.mark.parametrize("kind, text, fork", [
    # (NVCaffe's solver options, its testing of the last epochs among them, run:
    # tests/test_nvcaffe_solver.py, as Intel Caffe's do: tests/test_intel_solver.py)
    # Intel Caffe's loss normalisation by a fixed number (loss_layer.cpp)
    ("net", 'layer { name: "l" type: "SoftmaxWithLoss" bottom: "x" bottom: "t" top: "l" '
     'loss_param { pre_fixed_normalizer: 2 } }', "Intel Caffe"),
    # NVCaffe elu_layer.cpp: y = lambda * ELU(x) (SELU)
    ("net", 'layer { name: "e" type: "ELU" bottom: "x" top: "y" elu_param { lambda: 1.05 } }',
     "NVCaffe"),
    # NVCaffe softmax_loss_layer.cpp: label_smoothing
    ("net", 'layer { name: "l" type: "SoftmaxWithLoss" bottom: "x" bottom: "t" top: "l" '
     'loss_param { label_smoothing: 0.1 } }', "NVCaffe"),
    # Intel Caffe mkldnn convolution: a ReLU fused into the convolution
    ("net", 'layer { name: "c" type: "Convolution" bottom: "x" top: "y" convolution_param { '
     'num_output: 1 kernel_size: 1 relu: true } }', "Intel Caffe"),
])
def test_unrun_fork_options_are_refused_naming_the_fork(tmp_path, kind, text, fork):
    from pycaffe_lite.errors import ProtoError
    from pycaffe_lite.proto import protoio

    path = tmp_path / "f.prototxt"
    path.write_text(text + "\n")
    read = protoio.read_solver_param if kind == "solver" else protoio.read_net_param
    with pytest.raises(ProtoError, match="a field of the %s" % fork):
        read(str(path))


# ---- Intel Caffe: BatchNorm statistics per sub-batch (stats_batch_size) -------------------
def _sub_batch_reference(x, size, eps=1e-5):
    """Each run of ``size`` items normalised with its own mean and biased variance."""
    out = np.empty_like(x)
    for start in range(0, x.shape[0], size):
        part = x[start:start + size]
        mean = part.mean(axis=(0, 2, 3), keepdims=True)
        var = ((part - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True)
        out[start:start + size] = (part - mean) / np.sqrt(var + eps)
    return out


BN_SUB = 'type: "BatchNorm" batch_norm_param { stats_batch_size: 2 moving_average_fraction: 0.5 }'


def test_batch_norm_statistics_per_sub_batch_and_their_running_sums():
    # Intel Caffe batch_norm_layer.cpp (Reshape, ForwardStatsBatch_cpu): a batch of 6 with
    # stats_batch_size 2 is three sub-batches, each normalised with its own statistics, each
    # folded into the running sums in turn with m = 2 items x 6 values per channel
    from pycaffe_lite.testing import empty_blobs, make_layer, random_blobs

    x = np.random.default_rng(5).standard_normal((6, 3, 2, 3)) * 2 + 1
    layer = make_layer(BN_SUB, np.float64)
    bottom, top = random_blobs([x], dtype=np.float64), empty_blobs(1, np.float64)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    np.testing.assert_allclose(top[0].data, _sub_batch_reference(x, 2), rtol=1e-10, atol=1e-12)
    f, m = 0.5, 12
    s = mean_sum = var_sum = 0
    for start in (0, 2, 4):
        part = x[start:start + 2]
        s = s * f + 1
        mean_sum = mean_sum * f + part.mean(axis=(0, 2, 3))
        var_sum = var_sum * f + part.var(axis=(0, 2, 3)) * m / (m - 1)
    np.testing.assert_allclose(layer.blobs[2].data, [s])
    np.testing.assert_allclose(layer.blobs[0].data, mean_sum, rtol=1e-12)
    np.testing.assert_allclose(layer.blobs[1].data, var_sum, rtol=1e-12)


def test_batch_norm_sub_batch_gradient():
    # Intel Caffe batch_norm_layer.cpp BackwardStatsBatch_cpu: each sub-batch's own formula
    from pycaffe_lite.testing import check_layer

    check_layer(BN_SUB, [(4, 2, 3, 2)], reshape_batch=False)
    # Intel's MKL layer with its scale and bias (use_weight_bias) takes the same statistics
    check_layer('type: "BatchNorm" engine: "MKLDNN" batch_norm_param { stats_batch_size: 2 '
                'filler { type: "uniform" min: 0.5 max: 2 } bias_filler { type: "uniform" } }',
                [(4, 2, 3, 2)], reshape_batch=False)


def test_net_bn_stats_batch_size_reaches_every_batch_norm():
    # Intel Caffe net.cpp / apply_bn_stats_batch_size.cpp: the net's bn_stats_batch_size is
    # set on every BatchNorm layer (Intel's ResNet-50 train_val: 32 with a batch of 128)
    import pycaffe_lite as caffe
    from google.protobuf import text_format

    # conv -> BatchNorm -> Scale -> ReLU in place, the chain that otherwise runs fused
    text = ('bn_stats_batch_size: 2 layer { name: "x" type: "Input" top: "x" input_param { '
            'shape { dim: 4 dim: 3 dim: 2 dim: 2 } } } layer { name: "c" type: "Convolution" '
            'bottom: "x" top: "y" convolution_param { num_output: 3 kernel_size: 1 '
            'bias_term: false weight_filler { type: "constant" value: 0 } } } '
            'layer { name: "bn" type: "BatchNorm" bottom: "y" top: "y" } '
            'layer { name: "s" type: "Scale" bottom: "y" top: "y" scale_param { bias_term: true } }'
            'layer { name: "r" type: "ReLU" bottom: "y" top: "y" }')
    param = text_format.Parse(text, caffe_pb2.NetParameter())
    net = caffe.Net(param, caffe.TRAIN)
    x = np.random.default_rng(2).standard_normal((4, 3, 2, 2)).astype(np.float32)
    net.params["c"][0].data[...] = np.eye(3).reshape(3, 3, 1, 1)
    net.blobs["x"].data[...] = x
    net.forward()
    expected = np.maximum(_sub_batch_reference(x.astype(np.float64), 2), 0)
    np.testing.assert_allclose(net.blobs["y"].data, expected, atol=2e-5)


def test_a_batch_that_does_not_divide_into_sub_batches_is_an_error():
    from pycaffe_lite.errors import LayerError
    from pycaffe_lite.testing import empty_blobs, make_layer, random_blobs

    layer = make_layer(BN_SUB, np.float64)
    with pytest.raises(LayerError, match="batch of 5 does not divide .*stats_batch_size 2"):
        layer.SetUp(random_blobs([(5, 2, 3)], dtype=np.float64), empty_blobs(1, np.float64))


@pytest.mark.parametrize("engine, applied", [
    ('engine: "MKLDNN"', True),
    ('batch_norm_param { engine: MKLDNN }', True),
    ('engine: "MKL2017"', False),
    ('engine: "CAFFE"', False),
    ('', False),
    # the layer's own engine wins over the engine string (Intel's GetBatchNormLayer)
    ('engine: "MKLDNN" batch_norm_param { engine: CAFFE }', False),
])
def test_batch_norm_relu_is_the_mkldnn_layers_only(engine, applied):
    # Intel Caffe mkldnn_batch_norm_layer.cpp appends the ReLU post-op for relu: true;
    # batch_norm_layer.cpp (CAFFE) and mkl_batch_norm_layer.cpp (MKL2017) never read relu
    from google.protobuf import text_format
    from pycaffe_lite.testing import empty_blobs, make_layer, random_blobs

    param = text_format.Parse('type: "BatchNorm" ' + engine, caffe_pb2.LayerParameter())
    param.batch_norm_param.relu = True
    x = np.random.default_rng(3).standard_normal((4, 2, 3))
    layer = make_layer(param, np.float64)
    bottom, top = random_blobs([x], dtype=np.float64), empty_blobs(1, np.float64)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    x_hat = (x - x.mean(axis=(0, 2), keepdims=True)) / np.sqrt(
        x.var(axis=(0, 2), keepdims=True) + float(np.float32(1e-5)))
    np.testing.assert_allclose(top[0].data, np.maximum(x_hat, 0) if applied else x_hat,
                               rtol=1e-9, atol=1e-12)


# ---- the forks' BatchNorm blobs in the PyTorch export -------------------------------------
def _bn_net(text):
    import pycaffe_lite as caffe
    from google.protobuf import text_format

    param = text_format.Parse('input: "x" input_shape { dim: 2 dim: 3 dim: 4 dim: 4 } '
                              'layer { name: "bn" type: "BatchNorm" bottom: "x" top: "y" %s }'
                              % text, caffe_pb2.NetParameter())
    param.state.phase = caffe_pb2.TEST
    return caffe.Net.from_param(param)


@pytest.mark.parametrize("text, relu", [
    # NVCaffe batch_norm_layer.cpp: y = x_hat * scale + bias, eps at least 1e-5
    ("batch_norm_param { scale_bias: true eps: 1e-7 }", False),
    # Intel Caffe mkldnn_batch_norm_layer.cpp: scale, bias and the ReLU post-op
    ('engine: "MKLDNN" batch_norm_param { relu: true }', True),
])
def test_pytorch_export_keeps_the_forks_scale_bias_and_relu(tmp_path, text, relu):
    torch = pytest.importorskip("torch")
    from pycaffe_lite.pytorch.compare import PyTorch

    net = _bn_net(text)
    mean, var = np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 3.0])
    scale, bias = np.array([2.0, -3.0, 4.0]), np.array([5.0, 6.0, -7.0])
    for blob, value in zip(net.params["bn"], (mean, var, [1.0], scale, bias)):
        blob.data[...] = value
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype(np.float32)
    c = (slice(None), None, None)  # per channel, over (N, C, H, W)
    expected = (x - mean[c]) / np.sqrt(var[c] + float(np.float32(1e-5))) * scale[c] + bias[c]
    if relu:
        expected = np.maximum(expected, 0)
    engine = PyTorch(None, None, net, folder=str(tmp_path))
    with torch.no_grad():
        out = engine.module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_pytorch_export_refuses_the_forks_batch_statistics(tmp_path):
    pytest.importorskip("torch")
    from pycaffe_lite.errors import CaffeError
    from pycaffe_lite.pytorch import export

    for text in ("batch_norm_param { scale_bias: true use_global_stats: false }",
                 "batch_norm_param { stats_batch_size: 1 use_global_stats: false }"):
        with pytest.raises(CaffeError, match="layer 'bn' .*use_global_stats only"):
            export(_bn_net(text), str(tmp_path))


def test_onnx_export_refuses_intel_sub_batch_statistics():
    # the export's batch statistics are the whole batch's, Intel's those of each sub-batch
    pytest.importorskip("onnx")
    from pycaffe_lite.errors import CaffeError
    from pycaffe_lite.onnx import export

    net = _bn_net("batch_norm_param { stats_batch_size: 1 use_global_stats: false }")
    with pytest.raises(CaffeError, match="stats_batch_size"):
        export(net)


# ---- Intel Caffe: SmoothL1Loss -------------------------------------------------------------
def test_smooth_l1_gradient_reaches_the_targets_too():
    # Intel Caffe test_smooth_L1_loss_layer.cpp TestGradient: four (10, 5, 1, 1) bottoms
    # (predictions, targets, inside and outside weights), sigma 2.4, loss_weight 3.7; the
    # gradient is checked for the predictions and for the targets (bottom 1)
    from pycaffe_lite.testing import check_layer

    for bottom in (0, 1):
        check_layer('type: "SmoothL1Loss" loss_weight: 3.7 smooth_l1_loss_param { sigma: 2.4 }',
                    [(10, 5, 1, 1)] * 4, check_bottom=bottom, seed=1701)
