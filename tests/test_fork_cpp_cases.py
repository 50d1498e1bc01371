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
    # NVCaffe caffe.proto SolverParameter: LARC (sgd_solver.cpp) and the rate's ramp-up
    ("solver", "base_lr: 0.1 larc: true larc_policy: \"clip\"", "NVCaffe"),
    ("solver", "base_lr: 0.1 rampup_interval: 100 rampup_lr: 0.01", "NVCaffe"),
    # Intel Caffe caffe.proto SolverParameter: warm-up
    ("solver", "base_lr: 0.1 warmup_iter: 10", "Intel Caffe"),
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
