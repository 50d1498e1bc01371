"""Darknet cfg options one by one, each on a small generated .cfg with random parameters:
against OpenCV's Darknet importer where it reads the option the way Darknet does, else
against a NumPy computation of the formula in AlexeyAB's Darknet (src/parser.c,
convolutional_layer.c, maxpool_layer.c, shortcut_layer.c, route_layer.c, blas.c,
activations.h).

The .weights files are written here: the header (major 0, minor 2, revision 0, then ``seen``
as a 64-bit integer), then each layer's parameters in file order.
"""

import struct

import numpy as np
import pytest

import pycaffe_lite
from pycaffe_lite.darknet import convert

from helpers.darknet import conv2d

FLT_MAX = float(np.finfo(np.float32).max)


def weights_file(arrays):
    head = struct.pack("<iiiQ", 0, 2, 0, 64)
    return head + b"".join(np.asarray(a, "<f4").tobytes() for a in arrays)


def run_ours(tmp_path, cfg_text, arrays, x):
    """Every Darknet layer's output (by layer number) of the converted net on input ``x``."""
    result = convert(cfg_text, weights_file(arrays))
    proto, model = tmp_path / "m.prototxt", tmp_path / "m.caffemodel"
    proto.write_text(str(result.net_param))
    model.write_bytes(result.weights_param.SerializeToString())
    net = pycaffe_lite.Net(str(proto), str(model), pycaffe_lite.TEST)
    net.blobs["data"].data[...] = x
    net.forward()
    return {i: net.blobs[b].data.copy() for i, b in result.blob_of_layer.items()}


def close(got, expected):
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5,
                               atol=1e-6 * max(1.0, float(np.abs(expected).max())))


def rand(rng, *shape):
    return rng.normal(0, 0.7, shape).astype(np.float32)


# ---- [connected] outputs (C x 1 x 1 in Darknet) combined with image layers ----------------
FLAT_AND_IMAGE = """\
[net]
width=3
height=2
channels=2

[avgpool]

[connected]
output=2
activation=linear

[%s]
%s
"""


@pytest.mark.parametrize("section,keys", [
    ("shortcut", "from=-2\nactivation=leaky"),
    ("route", "layers=-1,0"),
    ("sam", "from=0"),
])
def test_connected_output_with_a_one_by_one_map(tmp_path, section, keys):
    # Darknet's [connected] gives 2 x 1 x 1 and [avgpool] 2 x 1 x 1; [shortcut] adds them,
    # [route] concatenates them, [sam] multiplies them.
    rng = np.random.default_rng(1)
    b, w = rand(rng, 2), rand(rng, 2, 2)
    x = rng.uniform(-1, 1, (1, 2, 2, 3)).astype(np.float32)
    out = run_ours(tmp_path, FLAT_AND_IMAGE % (section, keys), [b, w.ravel()], x)
    avg = x[0].astype(np.float64).mean(axis=(1, 2))
    fc = w @ avg + b
    if section == "shortcut":
        s = fc + avg
        expected = np.where(s > 0, s, 0.1 * s)
    elif section == "route":
        expected = np.concatenate([fc, avg])
    else:
        expected = avg * fc
    got = out[2]
    close(got.reshape(got.shape[0], -1)[0], expected)


@pytest.mark.parametrize("section", ["activation", "connected"])
@pytest.mark.parametrize("act,why", [
    ("mish", "does not compute it"), ("swish", "does not compute it"),
    ("relu6", r"computes it in GPU builds only \(on the CPU its output would be zeros\)")])
def test_activations_that_darknet_does_not_compute_there_are_refused(section, act, why):
    # [activation] and [connected] run activate_array, whose activate() has no case for these
    # (it returns 0: the layer's output would be zeros; the GPU build computes relu6), where a
    # [convolutional] computes them
    from pycaffe_lite.darknet import DarknetError
    cfg_text = "[net]\nwidth=3\nheight=2\nchannels=2\n\n[%s]\nactivation=%s\n" % (section, act)
    with pytest.raises(DarknetError, match=r"<string>:7: layer 0 \[%s\]: activation=%s: "
                                           r"Darknet's \[%s\] %s" % (section, act, section, why)):
        convert(cfg_text)
    convert(cfg_text.replace("[%s]" % section, "[convolutional]\nfilters=2\nsize=1"))


# ---- against OpenCV's importer ------------------------------------------------------------
cv2 = pytest.importorskip("cv2", reason="OpenCV (opencv-python-headless) is a test extra")


def conv_params(rng, n, fan, bn):
    """A [convolutional] layer's parameters in file order: biases, (scales, rolling mean,
    rolling variance), weights (``n`` filters of ``fan`` = channels / groups * size^2)."""
    out = [rand(rng, n)]
    if bn:
        out += [rng.uniform(0.5, 1.5, n), rand(rng, n), rng.uniform(0.3, 2.0, n)]
    return out + [rng.normal(0, 1.5 / np.sqrt(fan), n * fan)]


def against_opencv(tmp_path, cfg_text, layers, seed=0):
    """The converted net's last layer and OpenCV's output on the same files; ``layers``: (n,
    fan, bn) of each [convolutional] in order."""
    rng = np.random.default_rng(seed)
    arrays = [a for n, fan, bn in layers for a in conv_params(rng, n, fan, bn)]
    (tmp_path / "m.cfg").write_text(cfg_text)
    (tmp_path / "m.weights").write_bytes(weights_file(arrays))
    shape = [int(v) for v in (cfg_text.split("channels=")[1].split()[0],
                              cfg_text.split("height=")[1].split()[0],
                              cfg_text.split("width=")[1].split()[0])]
    x = rng.uniform(-1, 1, [1] + shape).astype(np.float32)
    ours = run_ours(tmp_path, cfg_text, arrays, x)
    theirs = cv2.dnn.readNetFromDarknet(str(tmp_path / "m.cfg"), str(tmp_path / "m.weights"))
    theirs.setInput(x)
    expected = theirs.forward()
    got = ours[max(ours)]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-4,
                               atol=1e-5 * max(1.0, float(np.abs(expected).max())))


def net(w, h, c):
    return "[net]\nwidth=%d\nheight=%d\nchannels=%d\n\n" % (w, h, c)


def conv(filters, size, keys="", act="linear", bn=0):
    return ("[convolutional]\nbatch_normalize=%d\nfilters=%d\nsize=%d\n%s\nactivation=%s\n\n"
            % (bn, filters, size, keys, act))


@pytest.mark.parametrize("act", ["linear", "logistic", "tanh", "relu"])
def test_activation_with_batch_normalize_matches_opencv(tmp_path, act):
    against_opencv(tmp_path, net(5, 4, 3) + conv(4, 3, "pad=1", act, bn=1), [(4, 27, 1)])


@pytest.mark.parametrize("cfg_text,layers", [
    # depthwise: groups = channels = filters
    (net(6, 5, 4) + conv(4, 3, "pad=1\ngroups=4", "leaky", bn=1), [(4, 9, 1)]),
    (net(6, 5, 4) + conv(6, 3, "pad=1\ngroups=2", "leaky"), [(6, 18, 0)]),
    # size 1 with pad=1: padding = size / 2 = 0
    (net(7, 6, 3) + conv(4, 1, "pad=1"), [(4, 3, 0)]),
    # even sizes with pad=1: padding 1, the output one larger (size 2) or halved (size 4)
    (net(7, 6, 3) + conv(4, 2, "pad=1"), [(4, 12, 0)]),
    (net(8, 7, 3) + conv(4, 4, "pad=1\nstride=2"), [(4, 48, 0)]),
    # padding alone, and pad=1 taking precedence over it
    (net(7, 6, 3) + conv(4, 3, "padding=2"), [(4, 27, 0)]),
    (net(7, 6, 3) + conv(4, 3, "pad=1\npadding=2"), [(4, 27, 0)]),
    (net(10, 9, 3) + conv(4, 3, "stride=3"), [(4, 27, 0)]),
    # one input channel
    (net(5, 4, 1) + conv(2, 3, "pad=1", "leaky", bn=1), [(2, 9, 1)]),
], ids=["depthwise", "groups2", "size1-pad1", "size2-pad1", "size4-pad1-stride2", "padding2",
        "pad-over-padding", "stride3", "channels1"])
def test_convolution_geometry_matches_opencv(tmp_path, cfg_text, layers):
    against_opencv(tmp_path, cfg_text, layers)


ONE_BY_ONE = conv(3, 1, "", "leaky")


@pytest.mark.parametrize("cfg_text,layers", [
    # absolute and relative indices mixed
    (net(6, 6, 3) + conv(3, 1, "", "leaky") + conv(4, 1, "", "leaky") + conv(5, 1, "", "leaky")
     + "[route]\nlayers=0,-2,2\n", [(3, 3, 0), (4, 3, 0), (5, 4, 0)]),
    # YOLOv4-tiny's split: the first half
    (net(6, 6, 3) + conv(4, 1, "", "leaky") + "[route]\nlayers=-1\ngroups=2\ngroup_id=0\n",
     [(4, 3, 0)]),
    # from a layer with more channels, and with fewer (the first min(c) are added)
    (net(6, 6, 3) + conv(5, 1, "", "leaky") + ONE_BY_ONE + "[shortcut]\nfrom=-2\n",
     [(5, 3, 0), (3, 5, 0)]),
    (net(6, 6, 3) + conv(2, 1, "", "leaky") + conv(4, 1, "", "leaky") + "[shortcut]\nfrom=-2\n",
     [(2, 3, 0), (4, 2, 0)]),
    (net(3, 4, 3) + ONE_BY_ONE + "[upsample]\nstride=3\n", [(3, 3, 0)]),
    (net(4, 4, 3) + ONE_BY_ONE + "[dropout]\nprobability=0.3\n", [(3, 3, 0)]),
    (net(10, 9, 3) + ONE_BY_ONE + "[maxpool]\nsize=3\nstride=3\n", [(3, 3, 0)]),
    (net(8, 8, 3) + ONE_BY_ONE + "[maxpool]\nstride=2\n", [(3, 3, 0)]),   # size = stride
    (net(6, 6, 3) + conv(4, 1, "", "leaky") + "[avgpool]\n" + conv(4, 1, "", "logistic")
     + "[scale_channels]\nfrom=-3\n", [(4, 3, 0), (4, 4, 0)]),
    (net(6, 6, 3) + conv(4, 1, "", "leaky") + conv(4, 1, "", "logistic") + "[sam]\nfrom=-2\n",
     [(4, 3, 0), (4, 4, 0)]),
], ids=["route-absolute-and-relative", "route-group0", "shortcut-more-channels",
        "shortcut-fewer-channels", "upsample3", "dropout", "maxpool3-3", "maxpool-size-default",
        "scale_channels", "sam"])
def test_sections_match_opencv(tmp_path, cfg_text, layers):
    against_opencv(tmp_path, cfg_text, layers)


# ---- against Darknet's formulas (options OpenCV does not read as Darknet does) ------------
def darknet_conv(x, arrays, stride=(1, 1), pad=0, groups=1):
    """A [convolutional] without batch normalisation on one image (c, h, w), as Darknet's
    im2col + gemm: ``arrays`` = [biases, weights]."""
    b, w = arrays
    n = b.size
    wt = w.reshape(n, x.shape[0] // groups, -1).astype(np.float64)
    k = int(round(np.sqrt(wt.shape[2])))
    return conv2d(x.astype(np.float64), wt.reshape(n, -1, k, k), stride, pad, groups) \
        + b[:, None, None]


ACTIVATIONS = {   # activations.h
    "logistic": lambda x: 1 / (1 + np.exp(-x)),
    "relu6": lambda x: np.minimum(np.maximum(x, 0), 6),
    "elu": lambda x: (x >= 0) * x + (x < 0) * (np.exp(x) - 1),
    "leaky": lambda x: np.where(x > 0, x, 0.1 * x),
    "ramp": lambda x: x * (x > 0) + 0.1 * x,
    "relie": lambda x: np.where(x > 0, x, 0.01 * x),
    "loggy": lambda x: 2 / (1 + np.exp(-x)) - 1,
    "selu": lambda x: (x >= 0) * 1.0507 * x + (x < 0) * 1.0507 * 1.6732 * (np.exp(x) - 1),
}


@pytest.mark.parametrize("keys,act,stride,pad", [
    ("", "logistic", (1, 1), 0),                     # the default activation is logistic
    ("activation=relu6", "relu6", (1, 1), 0),        # OpenCV refuses relu6 and elu
    ("activation=elu", "elu", (1, 1), 0),
    ("stride=2\nstride_y=1\npad=1\nactivation=leaky", "leaky", (1, 2), 1),
    ("stride=3\nstride_x=1\npad=1\nactivation=leaky", "leaky", (3, 1), 1),
    ("stride_x=0\nstride=2\nactivation=leaky", "leaky", (2, 2), 0),   # stride_x < 1: stride
], ids=["default-logistic", "relu6", "elu", "stride_y-over-stride", "stride_x-over-stride",
        "stride_x-0"])
def test_convolution_options_follow_darknet(tmp_path, keys, act, stride, pad):
    cfg_text = net(9, 8, 3) + "[convolutional]\nfilters=4\nsize=3\n%s\n" % keys
    rng = np.random.default_rng(4)
    arrays = [rand(rng, 4) * 4, rand(rng, 4 * 27) * 4]   # large enough to reach relu6's 6
    x = rng.uniform(-1, 1, (1, 3, 8, 9)).astype(np.float32)
    got = run_ours(tmp_path, cfg_text, arrays, x)[0][0]
    close(got, ACTIVATIONS[act](darknet_conv(x[0], arrays, stride, pad)))
    if act == "relu6":
        assert (got == 6).any() and (got == 0).any()


def dilated_conv(x, arrays, size, stride, pad, dilation):
    """Darknet's dilated convolution (im2col_cpu_ext with padding pad * dilation) on one
    image, for the output size Darknet gives it, (h + 2 pad - size) / stride + 1."""
    b, w = arrays
    w = w.reshape(b.size, x.shape[0], size, size).astype(np.float64)
    c, h, wd = x.shape
    p = pad * dilation
    xp = np.zeros((c, h + 2 * p, wd + 2 * p))
    xp[:, p:p + h, p:p + wd] = x
    oh, ow = (h + 2 * pad - size) // stride + 1, (wd + 2 * pad - size) // stride + 1
    out = np.empty((b.size, oh, ow))
    span = dilation * (size - 1) + 1
    for i in range(oh):
        for j in range(ow):
            r, q = i * stride, j * stride
            patch = xp[:, r:r + span:dilation, q:q + span:dilation]
            out[:, i, j] = (w * patch[None]).sum(axis=(1, 2, 3)) + b
    return out


@pytest.mark.parametrize("size,stride,dilation", [(3, 1, 2), (3, 2, 2), (5, 1, 3), (3, 1, 4)])
def test_dilation(tmp_path, size, stride, dilation):
    # im2col_cpu_ext with padding pad * dilation (OpenCV's importer ignores dilation)
    cfg_text = net(9, 8, 2) + conv(3, size, "pad=1\nstride=%d\ndilation=%d" % (stride, dilation))
    rng = np.random.default_rng(size + dilation)
    arrays = [rand(rng, 3), rand(rng, 3 * 2 * size * size)]
    x = rng.uniform(-1, 1, (1, 2, 8, 9)).astype(np.float32)
    close(run_ours(tmp_path, cfg_text, arrays, x)[0][0],
          dilated_conv(x[0], arrays, size, stride, size // 2, dilation))


def test_dilation_where_darknets_sizes_disagree_is_refused():
    # without pad, Darknet's output is (h - size) / stride + 1, but its dilated im2col fills a
    # smaller map, which the product then reads with the wrong row length
    from pycaffe_lite.darknet import DarknetError
    with pytest.raises(DarknetError, match=r"<string>:10: layer 0 \[convolutional\]: "
                                           r"dilation=2 with size=3 and padding 0"):
        convert(net(9, 8, 2) + conv(3, 3, "dilation=2"))


def test_dilation_of_a_one_by_one_kernel_is_ignored(tmp_path, recwarn):
    # parse_convolutional: if (size == 1) dilation = 1; Darknet reads the key (no warning)
    cfg_text = net(5, 4, 3) + conv(2, 1, "dilation=2")
    rng = np.random.default_rng(5)
    arrays = [rand(rng, 2), rand(rng, 6)]
    x = rng.uniform(-1, 1, (1, 3, 4, 5)).astype(np.float32)
    close(run_ours(tmp_path, cfg_text, arrays, x)[0][0], darknet_conv(x[0], arrays))
    assert not [w for w in recwarn if "dilation" in str(w.message)]


def darknet_maxpool(x, size, stride_y, stride_x, padding):
    """forward_maxpool_layer's loops over one image (c, h, w)."""
    c, h, w = x.shape
    oh, ow = (h + padding - size) // stride_y + 1, (w + padding - size) // stride_x + 1
    out = np.full((c, oh, ow), -FLT_MAX)
    for i in range(oh):
        for j in range(ow):
            for n in range(size):
                for m in range(size):
                    r, q = i * stride_y + n - padding // 2, j * stride_x + m - padding // 2
                    if 0 <= r < h and 0 <= q < w:
                        out[:, i, j] = np.maximum(out[:, i, j], x[:, r, q])
    return out


@pytest.mark.parametrize("size,stride_y,stride_x,padding,hw", [
    (2, 1, 2, None, (8, 8)), (2, 1, 2, None, (7, 7)), (3, 2, 1, None, (7, 8)),
    (3, 1, 3, 2, (6, 9)), (4, 2, 3, None, (9, 10)),
])
def test_maxpool_stride_x_and_stride_y(size, stride_y, stride_x, padding, hw):
    # OpenCV's importer reads stride only
    keys = "size=%d\nstride_x=%d\nstride_y=%d\n" % (size, stride_x, stride_y)
    if padding is not None:
        keys += "padding=%d\n" % padding
    result = convert(net(hw[1], hw[0], 2) + "[maxpool]\n" + keys)
    model = pycaffe_lite.Net(result.net_param, pycaffe_lite.TEST)
    x = np.random.default_rng(size).normal(size=(2,) + hw)
    model.blobs["data"].data[0] = x
    model.forward()
    expected = darknet_maxpool(x, size, stride_y, stride_x, size - 1 if padding is None
                               else padding)
    np.testing.assert_array_equal(model.blobs["maxpool0"].data[0], expected.astype(np.float32))


def test_route_groups_over_several_layers(tmp_path):
    # route_layer.c: from each layer its part input_size / groups at part * group_id; the
    # output has (4 + 6) / 2 channels (OpenCV's importer gives 4)
    cfg_text = net(4, 3, 2) + conv(4, 1) + conv(6, 1) + "[route]\nlayers=0,1\ngroups=2\n" \
        "group_id=1\n"
    rng = np.random.default_rng(6)
    arrays = [rand(rng, 4), rand(rng, 8), rand(rng, 6), rand(rng, 24)]
    x = rng.uniform(-1, 1, (1, 2, 3, 4)).astype(np.float32)
    out = run_ours(tmp_path, cfg_text, arrays, x)
    first = darknet_conv(x[0], arrays[:2])
    second = darknet_conv(first, arrays[2:])
    close(out[2][0], np.concatenate([first[2:], second[3:]]))


def test_shortcut_from_several_layers(tmp_path):
    # shortcut_multilayer_cpu: the previous layer plus each from layer (OpenCV's importer
    # adds the first only), then the activation
    cfg_text = net(4, 3, 2) + conv(2, 1) + conv(2, 1) + conv(2, 1) + \
        "[shortcut]\nfrom=-2,0\nactivation=leaky\n"
    rng = np.random.default_rng(7)
    arrays = [rand(rng, s) for s in (2, 4, 2, 4, 2, 4)]
    x = rng.uniform(-1, 1, (1, 2, 3, 4)).astype(np.float32)
    out = run_ours(tmp_path, cfg_text, arrays, x)
    c0 = darknet_conv(x[0], arrays[0:2])
    c1 = darknet_conv(c0, arrays[2:4])
    c2 = darknet_conv(c1, arrays[4:6])
    close(out[3][0], ACTIVATIONS["leaky"](c2 + c1 + c0))


def test_scale_channels_scale_wh(tmp_path):
    # forward_scale_channels_layer with scale_wh: output[i] = input[i % (h w) + batch offset]
    # * from[i] (OpenCV's importer does not read scale_wh)
    cfg_text = net(4, 3, 2) + conv(3, 1) + conv(1, 1, "", "logistic") + \
        "[scale_channels]\nfrom=-2\nscale_wh=1\n"
    rng = np.random.default_rng(8)
    arrays = [rand(rng, 3), rand(rng, 6), rand(rng, 1), rand(rng, 3)]
    x = rng.uniform(-1, 1, (1, 2, 3, 4)).astype(np.float32)
    out = run_ours(tmp_path, cfg_text, arrays, x)
    src = darknet_conv(x[0], arrays[:2])
    scale = ACTIVATIONS["logistic"](darknet_conv(src, arrays[2:]))
    close(out[2][0], (src.ravel() * scale.ravel()[np.arange(src.size) % 12]).reshape(src.shape))


@pytest.mark.parametrize("act", ["ramp", "relie", "loggy", "selu"])
@pytest.mark.parametrize("section", ["convolutional", "activation", "shortcut"])
def test_more_of_darknets_activations(tmp_path, act, section):
    # activations.h's ramp (pjreddie's strided.cfg), relie, loggy and selu, which
    # activate() computes for [convolutional], [activation] and [shortcut] alike
    first = conv(3, 1, "", "linear")
    cfg_text = net(4, 3, 2) + {
        "convolutional": conv(3, 1, "", act),
        "activation": first + "[activation]\nactivation=%s\n" % act,
        "shortcut": first + "[shortcut]\nfrom=-1\nactivation=%s\n" % act}[section]
    rng = np.random.default_rng(9)
    arrays = [rand(rng, 3), rand(rng, 6) * 3]
    x = rng.uniform(-1, 1, (1, 2, 3, 4)).astype(np.float32)
    out = run_ours(tmp_path, cfg_text, arrays, x)
    before = darknet_conv(x[0], arrays)
    if section == "shortcut":
        before = before + before
    assert (before < 0).any() and (before > 0).any()
    close(out[max(out)][0], ACTIVATIONS[act](before))


@pytest.mark.parametrize("keys,s,scale", [("stride=-2", 2, 1.0), ("stride=-3\nscale=0.5", 3, 0.5)])
def test_negative_upsample_stride_sums_blocks(tmp_path, keys, s, scale):
    # upsample_cpu with forward=0: out[c, y, x] += scale * in[c, y s + dy, x s + dx]
    cfg_text = net(12, 6, 2) + "[upsample]\n%s\n" % keys
    x = np.random.default_rng(s).uniform(-1, 1, (1, 2, 6, 12)).astype(np.float32)
    out = run_ours(tmp_path, cfg_text, [], x)[0]
    expected = scale * x[0].astype(np.float64).reshape(2, 6 // s, s, 12 // s, s).sum(axis=(2, 4))
    close(out[0], expected)


def test_negative_upsample_stride_needs_whole_blocks():
    from pycaffe_lite.darknet import DarknetError
    with pytest.raises(DarknetError, match=r"<string>:7: layer 0 \[upsample\]: stride=-2 needs "
                                           r"the input's height and width \(5x6\) to divide"):
        convert(net(6, 5, 2) + "[upsample]\nstride=-2\n")


def darknet_weighted_sum(inputs, weights, per_channel, normalization):
    """shortcut_multilayer_cpu with weights: inputs[0] is the previous layer's output, the
    others the from layers' (each (c, h, w)); ``weights`` as stored, (n + 1) or (n + 1) * c."""
    n1, c = len(inputs), inputs[0].shape[0]
    w = np.asarray(weights, np.float64).reshape(n1, c if per_channel else 1)
    if normalization in ("relu", "avg_relu"):   # parse_shortcut reads avg_relu as relu
        w = np.maximum(w, 0) / (0.0001 + np.maximum(w, 0).sum(axis=0))
    elif normalization == "softmax":
        e = np.exp(w - w.max(axis=0))
        w = e / (0.0001 + e.sum(axis=0))
    w = np.broadcast_to(w, (n1, c))
    return sum(w[k][:, None, None] * inputs[k] for k in range(n1))


@pytest.mark.parametrize("weights_type,normalization,froms", [
    ("per_feature", None, "-2"), ("per_channel", "relu", "-2"),
    ("per_feature", "softmax", "-2,-3"), ("per_channel", "softmax", "0,-2"),
    ("per_layer", "avg_relu", "-3"),
])
def test_weighted_shortcut(tmp_path, weights_type, normalization, froms):
    # AlexeyAB's weights_type / weights_normalization (BiFPN-style fusions); OpenCV's importer
    # does not read them
    keys = "from=%s\nweights_type=%s\nactivation=leaky\n" % (froms, weights_type)
    if normalization:
        keys += "weights_normalization=%s\n" % normalization
    cfg_text = net(4, 3, 2) + conv(3, 1) + conv(3, 1) + conv(3, 1) + "[shortcut]\n" + keys
    rng = np.random.default_rng(10)
    arrays = [rand(rng, 3), rand(rng, 6), rand(rng, 3), rand(rng, 9), rand(rng, 3), rand(rng, 9)]
    n1 = 1 + len(froms.split(","))
    weights = rand(rng, n1 * (3 if weights_type == "per_channel" else 1))
    x = rng.uniform(-1, 1, (1, 2, 3, 4)).astype(np.float32)
    out = run_ours(tmp_path, cfg_text, arrays + [weights], x)
    convs = [darknet_conv(x[0], arrays[0:2])]
    convs.append(darknet_conv(convs[0], arrays[2:4]))
    convs.append(darknet_conv(convs[1], arrays[4:6]))
    froms = [convs[int(f) + 3 if int(f) < 0 else int(f)] for f in froms.split(",")]
    total = darknet_weighted_sum([convs[2]] + froms, weights,
                                 weights_type == "per_channel", normalization)
    close(out[3][0], ACTIVATIONS["leaky"](total))


@pytest.mark.parametrize("keys,message", [
    ("weights_type=per_pixel", r":15: layer 1 \[shortcut\]: weights_type=per_pixel: Darknet "
                               r"knows none"),
    ("weights_type=per_channel\nweights_normalization=max",
     r":16: layer 1 \[shortcut\]: weights_normalization=max: Darknet knows"),
])
def test_weighted_shortcut_errors_name_the_line(keys, message):
    from pycaffe_lite.darknet import DarknetError
    with pytest.raises(DarknetError, match=message):
        convert(net(4, 3, 2) + conv(2, 1) + "[shortcut]\nfrom=0\n" + keys + "\n")
