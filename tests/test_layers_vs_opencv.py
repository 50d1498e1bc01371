"""BVLC layers with their less common parameters, saved here (prototxt + .caffemodel) and run by
OpenCV's dnn Caffe importer, an independent implementation: the outputs agree.

Left out where OpenCV 4.14 differs from BVLC Caffe's source (and we follow Caffe): a
Deconvolution's dilation (OpenCV's output size leaves it out), LRN's k, Log's base/scale/shift,
Swish's beta, InnerProduct's transpose, a Scale's bias with two bottoms, MVN's eps (Caffe adds it
to the standard deviation), PriorBox's clip default (false in the SSD fork), Slice's slice_dim
and img_h/img_w of PriorBox."""

import numpy as np
import pytest

import pycaffe_lite as caffe

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")

FILL = 'weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "gaussian" std: 0.3 }'


def one(layer_type, params, shapes=((2, 3, 9, 8),), tops=("y",)):
    bottoms = " ".join('bottom: "d%d"' % i for i in range(len(shapes)))
    top = " ".join('top: "%s"' % t for t in tops)
    # OpenCV's forward() takes a layer's name: the layer is named after its (first) top
    text = 'layer { name: "%s" type: "%s" %s %s %s }\n' % (tops[0], layer_type, bottoms, top,
                                                          params)
    if len(tops) > 1:  # one identity layer per top
        text += "".join('layer { name: "%s_out" type: "Power" bottom: "%s" top: "%s_out" }\n'
                        % (t, t, t) for t in tops)
        tops = tuple(t + "_out" for t in tops)
    return shapes, text, tops


def conv(params, shape=(2, 4, 9, 8), kind="Convolution"):
    return one(kind, "convolution_param { %s %s }" % (params, FILL), (shape,))


def pool(params, shape=(2, 3, 9, 8)):
    return one("Pooling", "pooling_param { %s }" % params, (shape,))


CASES = {
    "conv group": conv("num_output: 6 kernel_size: 3 group: 2 pad: 1"),
    "conv depth multiplier": conv("num_output: 8 kernel_size: 3 group: 4 pad: 1 stride: 2"),
    "conv dilation h/w": conv("num_output: 4 kernel_size: 3 dilation: 2 dilation: 3"),
    "conv pad_h pad_w": conv("num_output: 4 kernel_size: 3 pad_h: 2 pad_w: 0"),
    "conv kernel/stride/pad h w": conv("num_output: 4 kernel_h: 2 kernel_w: 4 stride_h: 3 "
                                       "stride_w: 1 pad_h: 1 pad_w: 2", (2, 3, 13, 10)),
    "conv per-axis lists": conv("num_output: 4 kernel_size: 3 kernel_size: 2 pad: 1 pad: 0 "
                                "stride: 2 stride: 1"),
    "conv no bias": conv("num_output: 4 kernel_size: 3 bias_term: false"),
    "conv stride over kernel": conv("num_output: 3 kernel_size: 2 stride: 3", (1, 2, 10, 9)),
    "deconv group": conv("num_output: 6 kernel_size: 3 group: 2 pad: 1", kind="Deconvolution"),
    "deconv stride over kernel": conv("num_output: 3 kernel_size: 2 stride: 3 pad: 1",
                                      kind="Deconvolution"),
    "deconv kernel/stride/pad h w": conv("num_output: 4 kernel_h: 2 kernel_w: 4 stride_h: 3 "
                                         "stride_w: 1 pad_h: 1 pad_w: 2", kind="Deconvolution"),
    # Caffe's ceil rounding; with pad the last window must start inside the padded input
    "max pool ceil pad": pool("pool: MAX kernel_size: 3 stride: 2 pad: 1", (2, 3, 6, 7)),
    "ave pool ceil pad": pool("pool: AVE kernel_size: 3 stride: 2 pad: 1", (2, 3, 6, 7)),
    "ave pool last window dropped": pool("pool: AVE kernel_size: 2 stride: 2 pad: 1",
                                         (1, 2, 5, 5)),
    "max pool k5 s4 p2": pool("pool: MAX kernel_size: 5 stride: 4 pad: 2", (1, 2, 12, 13)),
    "ave pool h w": pool("pool: AVE kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 2 pad_h: 1 "
                         "pad_w: 0"),
    "ave pool global": pool("pool: AVE global_pooling: true"),
    "max pool floor": pool("pool: MAX kernel_size: 3 stride: 2 ceil_mode: false", (1, 2, 6, 6)),
    "max pool mask": one("Pooling", "pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 }",
                         tops=("v", "mask")),
    "LRN across": one("LRN", "lrn_param { local_size: 3 alpha: 1.3 beta: 0.5 }"),
    "LRN across wide": one("LRN", "lrn_param { local_size: 7 alpha: 0.3 beta: 0.75 }"),
    "LRN within": one("LRN", "lrn_param { local_size: 5 alpha: 2 beta: 0.6 "
                             "norm_region: WITHIN_CHANNEL }"),
    "inner product axis 2": one("InnerProduct", "inner_product_param { num_output: 6 axis: 2 "
                                                "%s }" % FILL, ((2, 3, 4, 5),)),
    "eltwise prod": one("Eltwise", "eltwise_param { operation: PROD }", ((2, 3, 4, 5),) * 3),
    "eltwise sum coeff": one("Eltwise", "eltwise_param { coeff: 0.5 coeff: -2 coeff: 3 }",
                             ((2, 3, 4, 5),) * 3),
    "eltwise max": one("Eltwise", "eltwise_param { operation: MAX }", ((2, 3, 4, 5),) * 3),
    "concat last axis": one("Concat", "concat_param { axis: -1 }", ((2, 3, 4, 5), (2, 3, 4, 2))),
    "slice points": one("Slice", "slice_param { axis: 1 slice_point: 2 slice_point: 7 }",
                        ((2, 9, 4, 5),), ("a", "b", "c")),
    "crop offsets": one("Crop", "crop_param { axis: 2 offset: 3 offset: 1 }",
                        ((2, 3, 10, 11), (2, 3, 5, 6))),
    "flatten axis end_axis": one("Flatten", "flatten_param { axis: 1 end_axis: 2 }"),
    "reshape axis num_axes": one("Reshape", "reshape_param { shape { dim: 3 dim: 3 } axis: 2 "
                                            "num_axes: 1 }"),
    "scale axis num_axes": one("Scale", "scale_param { axis: 1 num_axes: 2 bias_term: true "
                                        "filler { type: 'gaussian' std: 1 } bias_filler { type: "
                                        "'gaussian' std: 1 } }"),
    "scale two bottoms": one("Scale", "scale_param { axis: 1 }", ((2, 3, 4, 5), (3, 4))),
    "power": one("Power", "power_param { power: 2.5 scale: 1.5 shift: 2.5 }"),
    "exp base": one("Exp", "exp_param { base: 2 scale: 1.5 shift: 0.5 }"),
    "ELU alpha": one("ELU", "elu_param { alpha: 0.7 }"),
    "PReLU": one("PReLU", "prelu_param { filler { type: 'gaussian' std: 0.5 } }"),
    "softmax axis": one("Softmax", "softmax_param { axis: 2 }"),
    "MVN": one("MVN", ""),
    "MVN across channels": one("MVN", "mvn_param { across_channels: true }"),
    "MVN mean only": one("MVN", "mvn_param { normalize_variance: false }"),
    "ReLU negative slope": one("ReLU", "relu_param { negative_slope: 0.1 }"),
    "AbsVal": one("AbsVal", ""),
    "BNLL": one("BNLL", ""),
    "Normalize per channel": one("Normalize", "norm_param { across_spatial: false channel_shared: "
                                              "false scale_filler { type: 'gaussian' std: 1 } }"),
    "Permute": one("Permute", "permute_param { order: 0 order: 2 order: 3 order: 1 }"),
    "PriorBox sizes and steps": one(
        "PriorBox", "prior_box_param { min_size: 10 min_size: 5 max_size: 20 max_size: 15 "
                    "aspect_ratio: 2 flip: true clip: true variance: 0.1 step_h: 7 step_w: 9 "
                    "offset: 0.3 }", ((1, 3, 5, 4), (1, 3, 40, 32))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_layer_matches_opencv(tmp_path, case):
    shapes, layers, tops = CASES[case]
    inputs = "".join('input: "d%d" input_shape { %s }\n'
                     % (i, " ".join("dim: %d" % d for d in s)) for i, s in enumerate(shapes))
    proto = tmp_path / "deploy.prototxt"
    proto.write_text(inputs + layers.replace("'", '"'))
    caffe.set_random_seed(3)
    net = caffe.Net(str(proto), caffe.TEST)
    weights = tmp_path / "deploy.caffemodel"
    net.save(str(weights))
    rng = np.random.default_rng(0)
    feed = {"d%d" % i: rng.uniform(0.1 if "power" in case else -2, 2, s).astype(np.float32)
            for i, s in enumerate(shapes)}
    net.forward(**feed)
    cvnet = cv2.dnn.readNetFromCaffe(str(proto), str(weights))
    for name in tops:
        ours = net.blobs[name].data
        for key, value in feed.items():
            cvnet.setInput(value, key)
        theirs = cvnet.forward(name)
        assert theirs.shape == ours.shape, name
        scale = float(np.abs(ours).max())
        assert scale > 0.1, "%s is trivially small" % name
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=2e-6 * scale, err_msg=name)


def test_batch_norm_scale_factor_zero_and_eps_match_opencv(tmp_path):
    """A BatchNorm whose scale-factor blob is 0 uses zero statistics (Caffe's 1/0 -> 0)."""
    proto = tmp_path / "bn.prototxt"
    proto.write_text('input: "x" input_shape { dim: 2 dim: 3 dim: 4 dim: 5 }\n'
                     'layer { name: "bn" type: "BatchNorm" bottom: "x" top: "y" '
                     'batch_norm_param { use_global_stats: true eps: 0.01 } }\n'
                     'layer { name: "bn0" type: "BatchNorm" bottom: "x" top: "z" '
                     'batch_norm_param { eps: 0.5 } }\n')
    net = caffe.Net(str(proto), caffe.TEST)
    rng = np.random.default_rng(1)
    for name, factor in (("bn", 2.0), ("bn0", 0.0)):
        net.params[name][0].data[...] = rng.normal(0, 2, 3)
        net.params[name][1].data[...] = rng.uniform(1, 4, 3)
        net.params[name][2].data[...] = factor
    weights = tmp_path / "bn.caffemodel"
    net.save(str(weights))
    x = rng.uniform(-2, 2, (2, 3, 4, 5)).astype(np.float32)
    net.forward(x=x)
    cvnet = cv2.dnn.readNetFromCaffe(str(proto), str(weights))
    for name, top in (("bn", "y"), ("bn0", "z")):
        cvnet.setInput(x)
        np.testing.assert_allclose(net.blobs[top].data, cvnet.forward(name), rtol=1e-5,
                                   atol=1e-5)
    np.testing.assert_allclose(net.blobs["z"].data, x / np.sqrt(0.5), rtol=1e-6)
