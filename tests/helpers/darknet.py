"""Test helpers for the Darknet import: writing .cfg/.weights files from NumPy, and an
independent NumPy implementation of Darknet's forward pass (pjreddie's semantics; routes with
groups as in AlexeyAB's fork) to compare converted nets with.

The reference reads the .cfg with its own few lines of parsing and the .weights with its own
offsets; it shares no code with pycaffe_lite.darknet. It computes in float64 from the float32
parameters, with loops written after Darknet's C (window offsets, output sizes, normalisation).
"""

import struct

import numpy as np

FLT_MAX = float(np.finfo(np.float32).max)

TINY_YOLO = """\
[net]
# a tiny YOLOv3-style detector
batch=64
subdivisions=8
width=20
height=16
channels=3

[convolutional]
batch_normalize=1
filters=8
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
batch_normalize=1
filters=16
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=2
stride=2

[convolutional]
batch_normalize=1
filters=16
size=3
pad=1
activation=mish

[maxpool]
size=2
stride=1

[route]
layers=-1,-3

[convolutional]
batch_normalize=1
filters=16
size=1
activation=leaky

[shortcut]
from=-4
activation=leaky

[route]
layers=-1
groups=2
group_id=1

[convolutional]
filters=21
size=1
stride=1
pad=1
activation=linear

[yolo]
mask = 3,4,5
anchors = 10,14,  23,27,  37,58,  81,82,  135,169,  344,319
classes=2
num=6
jitter=.3
ignore_thresh = .7
truth_thresh = 1
random=1

[route]
layers = -4

[convolutional]
batch_normalize=1
filters=8
size=1
stride=1
pad=1
activation=swish

[upsample]
stride=2

[route]
layers = -1, 2

[convolutional]
batch_normalize=1
filters=16
size=3
stride=1
pad=1
groups=2
activation=leaky

[convolutional]
filters=21
size=1
stride=1
pad=1
activation=linear

[yolo]
mask = 0,1,2
anchors = 10,14,  23,27,  37,58,  81,82,  135,169,  344,319
classes=2
num=6
"""

CLASSIFIER = """\
[net]
batch=128
subdivisions=1
width=10
height=7
channels=3
learning_rate=0.1
policy=poly
power=4
max_batches=1000

[convolutional]
batch_normalize=1
filters=6
size=3
stride=1
pad=1
activation=leaky

[maxpool]
size=3
stride=2

[convolutional]
filters=8
size=3
stride=2
pad=1
activation=relu

[connected]
batch_normalize=1
output=12
activation=leaky

[dropout]
probability=.5

[connected]
output=5
activation=linear

[softmax]
groups=1
"""

CLASSIFIER_AVG = """\
[net]
width=6
height=6
channels=2

[convolutional]
filters=6
size=1
activation=tanh

[batchnorm]

[activation]
activation=elu

[avgpool]

[connected]
output=6
activation=logistic

[softmax]
groups=2
temperature=2
"""

REGION_CFG = """\
[net]
width=8
height=6
channels=3

[convolutional]
batch_normalize=1
filters=8
size=3
stride=1
pad=1
activation=leaky

[convolutional]
filters=16
size=1
activation=linear

[region]
anchors = 1.08,1.19,  3.42,4.41
bias_match=1
classes=3
coords=4
num=2
softmax=%d
background=%d
jitter=.2
rescore=1
"""


# ---- writing files ------------------------------------------------------------------------
def weights_bytes(arrays, major=0, minor=2, revision=0, seen=12345):
    """A .weights file: header, then the float32 arrays back to back."""
    wide = (major * 10 + minor) >= 2 and major < 1000 and minor < 1000
    head = struct.pack("<3i", major, minor, revision)
    head += struct.pack("<Q" if wide else "<I", seen)
    body = b"".join(np.asarray(a, np.float32).ravel().tobytes() for a in arrays)
    return head + body


def random_params(cfg_text, seed=0, transpose_connected=False, bn_variant="pjreddie"):
    """Random parameters for every layer of ``cfg_text`` that has some, in Darknet's file
    order; returns the list of arrays (to pass to :func:`weights_bytes`). A ``[batchnorm]``
    section has biases only in AlexeyAB's layout (``bn_variant="alexeyab"``)."""
    rng = np.random.default_rng(seed)
    net, sections = parse(cfg_text)
    arrays = []
    shapes = infer_shapes(net, sections)
    for i, (kind, opts) in enumerate(sections):
        c, h, w = shapes[i][0]
        if kind in ("convolutional", "conv"):
            n = int(opts.get("filters", 1))
            k = int(opts.get("size", 1))
            g = int(opts.get("groups", 1))
            arrays.append(rng.normal(0, 0.5, n))
            if int(opts.get("batch_normalize", 0)):
                arrays.append(rng.uniform(0.5, 1.5, n))        # scales
                arrays.append(rng.normal(0, 0.3, n))            # rolling mean
                arrays.append(rng.uniform(0.3, 2.0, n))         # rolling variance
            fan = c // g * k * k
            arrays.append(rng.normal(0, 1.5 / np.sqrt(fan), n * fan))
        elif kind in ("connected", "conn"):
            n = int(opts.get("output", 1))
            inputs = c * h * w
            arrays.append(rng.normal(0, 0.5, n))
            wts = rng.normal(0, 1.5 / np.sqrt(inputs), (n, inputs))
            arrays.append(wts.T.ravel() if transpose_connected else wts.ravel())
            if int(opts.get("batch_normalize", 0)):
                arrays.append(rng.uniform(0.5, 1.5, n))
                arrays.append(rng.normal(0, 0.3, n))
                arrays.append(rng.uniform(0.3, 2.0, n))
        elif kind == "batchnorm":
            if bn_variant == "alexeyab":
                arrays.append(rng.normal(0, 0.5, c))
            arrays.append(rng.uniform(0.5, 1.5, c))
            arrays.append(rng.normal(0, 0.3, c))
            arrays.append(rng.uniform(0.3, 2.0, c))
    return [np.asarray(a, np.float32) for a in arrays]


# ---- the reference ------------------------------------------------------------------------
def parse(cfg_text):
    """([net] options, [(section, options)]) with Darknet's whitespace and comment rules."""
    sections = []
    for raw in cfg_text.splitlines():
        line = "".join(raw.split())
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            sections.append((line[1:-1], {}))
        else:
            key, _, value = line.partition("=")
            sections[-1][1].setdefault(key, value)
    return sections[0][1], sections[1:]


def _ints(value):
    return [int(v) for v in value.split(",") if v]


def infer_shapes(net, sections):
    """((c, h, w) in, (c, h, w) out) per layer, Darknet's size rules."""
    cur = (int(net.get("channels", 0)), int(net.get("height", 0)), int(net.get("width", 0)))
    if not all(cur):
        cur = (int(net["inputs"]), 1, 1)
    outs, shapes = [], []
    for i, (kind, o) in enumerate(sections):
        c, h, w = cur
        if kind in ("convolutional", "conv"):
            k, s = int(o.get("size", 1)), int(o.get("stride", 1))
            sy, sx = int(o.get("stride_y", s)), int(o.get("stride_x", s))
            p = k // 2 if int(o.get("pad", 0)) else int(o.get("padding", 0))
            out = (int(o.get("filters", 1)), (h + 2 * p - k) // sy + 1,
                   (w + 2 * p - k) // sx + 1)
        elif kind in ("maxpool", "max"):
            s = int(o.get("stride", 1))
            k = int(o.get("size", s))
            p = int(o.get("padding", k - 1))
            out = (c, (h + p - k) // s + 1, (w + p - k) // s + 1)
        elif kind in ("avgpool", "avg"):
            out = (c, 1, 1)
        elif kind in ("connected", "conn"):
            out = (int(o.get("output", 1)), 1, 1)
        elif kind == "route":
            srcs = [outs[r + i if r < 0 else r] for r in _ints(o["layers"])]
            g = int(o.get("groups", 1))
            out = (sum(sc for sc, _, _ in srcs) // g, srcs[0][1], srcs[0][2])
        elif kind == "upsample":
            s = int(o.get("stride", 2))
            out = (c, h * s, w * s)
        else:
            out = (c, h, w)
        shapes.append((cur, out))
        outs.append(out)
        cur = out
    return shapes


def activate(x, name):
    if name == "linear":
        return x
    if name == "leaky":
        return np.where(x > 0, x, 0.1 * x)
    if name == "relu":
        return x * (x > 0)
    if name == "logistic":
        return 1.0 / (1.0 + np.exp(-x))
    if name == "tanh":
        return (np.exp(2 * x) - 1) / (np.exp(2 * x) + 1)
    if name == "swish":
        return x / (1.0 + np.exp(-x))
    if name == "mish":
        sp = np.where(x > 20, x, np.where(x < -20, np.exp(x), np.log(np.exp(x) + 1)))
        return x * np.tanh(sp)
    if name == "elu":
        return (x >= 0) * x + (x < 0) * (np.exp(x) - 1)
    raise ValueError(name)


def conv2d(x, weights, stride, pad, groups):
    """Darknet's convolution (im2col + gemm), one image ``x`` (c, h, w); ``stride`` is one
    number or (stride_y, stride_x)."""
    sy, sx = stride if isinstance(stride, tuple) else (stride, stride)
    c, h, w = x.shape
    n, cg, k, _ = weights.shape
    oh = (h + 2 * pad - k) // sy + 1
    ow = (w + 2 * pad - k) // sx + 1
    xp = np.zeros((c, h + 2 * pad, w + 2 * pad))
    xp[:, pad:pad + h, pad:pad + w] = x
    out = np.zeros((n, oh, ow))
    per = n // groups
    for g in range(groups):
        cols = np.empty((cg, k, k, oh, ow))
        for ki in range(k):
            for kj in range(k):
                cols[:, ki, kj] = xp[g * cg:(g + 1) * cg,
                                     ki:ki + sy * (oh - 1) + 1:sy,
                                     kj:kj + sx * (ow - 1) + 1:sx]
        wg = weights[g * per:(g + 1) * per].reshape(per, -1)
        out[g * per:(g + 1) * per] = (wg @ cols.reshape(cg * k * k, -1)).reshape(per, oh, ow)
    return out


def maxpool(x, size, stride, padding):
    """Darknet's forward_maxpool_layer, loop for loop, on one image (c, h, w)."""
    c, h, w = x.shape
    oh = (h + padding - size) // stride + 1
    ow = (w + padding - size) // stride + 1
    off = -(padding // 2)
    out = np.empty((c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            best = np.full(c, -FLT_MAX)
            for n in range(size):
                for m in range(size):
                    r, q = off + i * stride + n, off + j * stride + m
                    if 0 <= r < h and 0 <= q < w:
                        best = np.maximum(best, x[:, r, q])
            out[:, i, j] = best
    return out


def normalize(x, mean, var, variant="pjreddie"):
    shape = (-1,) + (1,) * (x.ndim - 1)
    if variant == "pjreddie":
        return (x - mean.reshape(shape)) / (np.sqrt(var.reshape(shape)) + .000001)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + .00001)


def softmax(x, temperature=1.0):
    z = x / temperature
    e = np.exp(z - z.max())
    return e / e.sum()


def darknet_forward(cfg_text, weights_data, image, bn_variant="pjreddie"):
    """Every layer's output for ``image`` (c, h, w) or (inputs,), as Darknet computes them
    at inference: a list of arrays, Darknet's layer order. ``weights_data``: the .weights
    bytes."""
    net, sections = parse(cfg_text)
    major, minor, _ = struct.unpack_from("<3i", weights_data, 0)
    wide = (major * 10 + minor) >= 2 and major < 1000 and minor < 1000
    params = np.frombuffer(weights_data, "<f4", offset=20 if wide else 16).astype(np.float64)
    transpose = major > 1000 or minor > 1000
    pos = [0]

    def take(n):
        out = params[pos[0]:pos[0] + n]
        assert out.size == n, "weights file too short for the reference"
        pos[0] += n
        return out

    outs = []
    x = np.asarray(image, np.float64)
    for i, (kind, o) in enumerate(sections):
        if kind in ("convolutional", "conv"):
            n, k = int(o.get("filters", 1)), int(o.get("size", 1))
            s, g = int(o.get("stride", 1)), int(o.get("groups", 1))
            s = (int(o.get("stride_y", s)), int(o.get("stride_x", s)))
            p = k // 2 if int(o.get("pad", 0)) else int(o.get("padding", 0))
            bn = int(o.get("batch_normalize", 0))
            biases = take(n)
            if bn:
                scales, mean, var = take(n), take(n), take(n)
            c = x.shape[0]
            wts = take(n * c // g * k * k).reshape(n, c // g, k, k)
            y = conv2d(x, wts, s, p, g)
            if bn:
                y = normalize(y, mean, var, bn_variant) * scales[:, None, None]
            y = y + biases[:, None, None]
            x = activate(y, o.get("activation", "logistic"))
        elif kind in ("maxpool", "max"):
            s = int(o.get("stride", 1))
            k = int(o.get("size", s))
            x = maxpool(x, k, s, int(o.get("padding", k - 1)))
        elif kind in ("avgpool", "avg"):
            x = x.reshape(x.shape[0], -1).mean(axis=1).reshape(-1, 1, 1)
        elif kind in ("connected", "conn"):
            n = int(o.get("output", 1))
            flat = x.ravel()
            biases = take(n)
            wts = take(n * flat.size)
            wts = wts.reshape(flat.size, n).T if transpose else wts.reshape(n, flat.size)
            y = wts @ flat
            if int(o.get("batch_normalize", 0)):
                scales, mean, var = take(n), take(n), take(n)
                y = normalize(y, mean, var, bn_variant) * scales
            x = activate(y + biases, o.get("activation", "logistic"))
        elif kind == "batchnorm":
            # pjreddie's parser.c reads scales, rolling_mean, rolling_variance (its biases stay
            # 0 from calloc, and forward_batchnorm_layer adds them); AlexeyAB's reads biases
            # first.
            c = x.shape[0]
            biases = take(c) if bn_variant == "alexeyab" else np.zeros(c)
            scales, mean, var = take(c), take(c), take(c)
            shape = (-1,) + (1,) * (x.ndim - 1)
            x = normalize(x, mean, var, bn_variant) * scales.reshape(shape) + \
                biases.reshape(shape)
        elif kind in ("softmax", "soft"):
            g = int(o.get("groups", 1))
            t = float(o.get("temperature", 1))
            flat = x.ravel()
            size = flat.size // g
            x = np.concatenate([softmax(flat[j * size:(j + 1) * size], t)
                                for j in range(g)]).reshape(x.shape)
        elif kind == "dropout":
            pass
        elif kind == "activation":
            x = activate(x, o.get("activation", "linear"))
        elif kind == "route":
            g, gid = int(o.get("groups", 1)), int(o.get("group_id", 0))
            parts = []
            for r in _ints(o["layers"]):
                src = outs[r + i if r < 0 else r]
                flat = src.ravel()
                part = flat.size // g
                parts.append((flat[gid * part:(gid + 1) * part], src.shape))
            h, w = parts[0][1][1:]
            x = np.concatenate([p for p, _ in parts]).reshape(-1, h, w)
        elif kind == "shortcut":
            src = outs[int(o["from"]) + i if int(o["from"]) < 0 else int(o["from"])]
            alpha, beta = float(o.get("alpha", 1)), float(o.get("beta", 1))
            x = activate(alpha * x + beta * src, o.get("activation", "linear"))
        elif kind == "upsample":
            s = int(o.get("stride", 2))
            x = float(o.get("scale", 1)) * x.repeat(s, axis=1).repeat(s, axis=2)
        elif kind == "yolo":
            classes = int(o.get("classes", 20))
            nmask = len(_ints(o["mask"])) if "mask" in o else int(o.get("num", 1))
            y = x.copy().reshape(nmask, 5 + classes, *x.shape[1:])
            scale = float(np.float32(o.get("scale_x_y", 1)))
            y[:, 0:2] = 1 / (1 + np.exp(-y[:, 0:2])) * scale - 0.5 * (scale - 1)
            y[:, 4:] = 1 / (1 + np.exp(-y[:, 4:]))
            x = y.reshape(x.shape)
        elif kind == "region":
            classes, coords = int(o.get("classes", 20)), int(o.get("coords", 4))
            num = int(o.get("num", 1))
            background = int(o.get("background", 0))
            use_softmax = int(o.get("softmax", 0))
            raw = x.reshape(num, coords + 1 + classes, *x.shape[1:])
            y = raw.copy()
            y[:, 0:2] = 1 / (1 + np.exp(-raw[:, 0:2]))
            if not background:
                y[:, coords] = 1 / (1 + np.exp(-raw[:, coords]))
            if use_softmax:
                start = coords + (0 if background else 1)
                z = raw[:, start:]
                e = np.exp(z - z.max(axis=1, keepdims=True))
                y[:, start:] = e / e.sum(axis=1, keepdims=True)
            else:
                y[:, coords + 1:] = 1 / (1 + np.exp(-raw[:, coords + 1:]))
            x = y.reshape(x.shape)
        else:
            raise ValueError("reference: no [%s]" % kind)
        outs.append(x)
    assert pos[0] == params.size, "reference: %d weights left over" % (params.size - pos[0])
    return outs
