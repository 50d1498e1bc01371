#!/usr/bin/env python
"""Write the references of ``tests/test_mxnet_real.py``: pieces of published MXNet models,
cut down, and a ``.params`` file with every element type MXNet 1.9.1 writes.

Needs MXNet 1.9.1 in a venv of its own (``pip install mxnet==1.9.1 "numpy<1.24"``) and runs
without pycaffe-lite::

    MXNET_SUBGRAPH_BACKEND=NONE python tools/mxnet_real_reference.py tests/fixtures/mxnet_real

Each model case is built the way its source builds it (the file named in its note), narrowed
to a few channels, with random parameters; MXNet writes ``NAME-symbol.json`` and
``NAME-0000.params`` (Gluon's ``export()`` or ``save_checkpoint``) and its outputs from
those files (a bound executor, inference). ``manifest.json`` lists each case: the inputs
(float16-exact values, stored as float16), the output files and the source. The
``params_types`` case is an NDArray file of one array per type MXNet writes, with the values
MXNet reads back from it, as float64. Seeded: running it again writes the same files.
"""

import json
import os
import sys

import mxnet as mx
import numpy as np
from mxnet.gluon import nn

RNG = np.random.RandomState(31)


def random_params(names_shapes):
    """Random values by name: BatchNorm's statistics spread out, weights by fan-in."""
    out = {}
    for name, shape in names_shapes:
        if name.endswith("gamma") and len(shape) == 1 and "prelu" not in name \
                and "alpha" not in name:
            v = RNG.uniform(0.5, 1.5, shape)
        elif name.endswith(("beta", "bias", "mean")):
            v = RNG.normal(0, 0.2, shape)
        elif name.endswith("var"):
            v = RNG.uniform(0.3, 1.5, shape)
        elif len(shape) <= 1:  # PReLU slopes
            v = RNG.uniform(0.05, 0.4, shape)
        else:
            v = RNG.normal(0, np.sqrt(2.0 / max(1, int(np.prod(shape[1:])))), shape)
        out[name] = mx.nd.array(v.astype(np.float32))
    return out


def make_input(shape, scale=1.0):
    return RNG.normal(0, scale, shape).astype(np.float16).astype(np.float32)


class Writer:
    def __init__(self, out):
        self.out = out
        self.manifest = {}
        os.makedirs(out, exist_ok=True)

    def path(self, name):
        return os.path.join(self.out, name)

    def run_files(self, name, inputs):
        sym = mx.sym.load(self.path(name + "-symbol.json"))
        saved = mx.nd.load(self.path(name + "-0000.params"))
        args = {k[4:]: v for k, v in saved.items() if k.startswith("arg:")}
        aux = {k[4:]: v for k, v in saved.items() if k.startswith("aux:")}
        args.update({k: mx.nd.array(v) for k, v in inputs.items()})
        args = {k: v for k, v in args.items() if k in sym.list_arguments()}
        exe = sym.bind(mx.cpu(), args, aux_states={k: aux[k] for k in sym.list_auxiliary_states()},
                       grad_req="null")
        return [o.asnumpy() for o in exe.forward(is_train=False)]

    def record(self, name, inputs, source):
        entry = {"inputs": {}, "outputs": [], "source": source}
        for key, arr in inputs.items():
            fname = "%s-in-%s.npy" % (name, key)
            np.save(self.path(fname), arr.astype(np.float16))
            entry["inputs"][key] = {"shape": list(arr.shape), "file": fname}
        for i, arr in enumerate(self.run_files(name, inputs)):
            fname = "%s-out%d.npy" % (name, i)
            np.save(self.path(fname), arr.astype(np.float32))
            entry["outputs"].append(fname)
        self.manifest[name] = entry
        print("%-22s outputs %s" % (name, [tuple(np.load(self.path(f)).shape)
                                          for f in entry["outputs"]]))

    def gluon(self, name, net, inputs, source):
        net.initialize()
        net.hybridize()
        arrays = [mx.nd.array(a) for a in inputs.values()]
        net(*arrays)
        params = net.collect_params()
        values = random_params(sorted((k, p.shape) for k, p in params.items()))
        for key, p in params.items():
            p.set_data(values[key])
        net(*arrays)
        net.export(self.path(name))
        self.record(name, inputs, source)

    def symbol(self, name, sym, inputs, source):
        arg_shapes, _, aux_shapes = sym.infer_shape(**{k: v.shape for k, v in inputs.items()})
        args = random_params([(k, s) for k, s in zip(sym.list_arguments(), arg_shapes)
                              if k not in inputs])
        aux = random_params(list(zip(sym.list_auxiliary_states(), aux_shapes)))
        mx.model.save_checkpoint(self.path(name), 0, sym, args, aux)
        self.record(name, inputs, source)


# ---- cases ------------------------------------------------------------------------------------
def gluon_prelu(w):
    """Gluon's ``nn.PReLU()``: one slope (shape (1,)) for every channel."""
    net = nn.HybridSequential(prefix="mnas_")
    with net.name_scope():
        net.add(nn.Conv2D(6, 3, padding=1, use_bias=False), nn.BatchNorm(), nn.PReLU(),
                nn.Conv2D(4, 1), nn.PReLU(alpha_initializer=mx.init.Constant(0.25)))
    w.gluon("gluon_prelu_shared", net, {"data": make_input((1, 3, 7, 6), 2.0)},
            "deepinsight/insightface recognition/arcface_mxnet/symbol/fmnasnet.py and "
            "fdensenet.py: Conv2D, BatchNorm, nn.PReLU() (alpha of shape (1,)), exported")


def alexnet_lrn(w):
    """The LRN of apache/mxnet's AlexNet symbol, and one whose window and alpha show."""
    S = mx.sym
    data = S.var("data")
    conv1 = S.Convolution(data, kernel=(5, 5), stride=(2, 2), num_filter=12, name="conv1")
    relu1 = S.Activation(conv1, act_type="relu", name="relu1")
    lrn1 = S.LRN(relu1, alpha=0.0001, beta=0.75, knorm=2, nsize=5, name="lrn1")
    pool1 = S.Pooling(lrn1, pool_type="max", kernel=(3, 3), stride=(2, 2), name="pool1")
    lrn2 = S.LRN(conv1, alpha=0.5, beta=0.6, knorm=1.5, nsize=3, name="lrn2")
    w.symbol("alexnet_lrn", S.Group([pool1, lrn2]), {"data": make_input((1, 3, 27, 27), 20.0)},
             "apache/mxnet example/image-classification/symbols/alexnet.py (v1.9.x): conv, "
             "relu, LRN(alpha=0.0001, beta=0.75, knorm=2, nsize=5), max pool; and an LRN of "
             "nsize 3 with a large alpha")


class SEBlock(nn.HybridBlock):
    """GluonCV's ResNeXt block with ``use_se``: the squeeze by AdaptiveAvgPooling2D."""

    def __init__(self, channels, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv = nn.Conv2D(channels, 3, padding=1, use_bias=False)
            self.bn = nn.BatchNorm()
            self.se = nn.HybridSequential(prefix="")
            self.se.add(nn.Conv2D(channels // 4, kernel_size=1, padding=0))
            self.se.add(nn.Activation("relu"))
            self.se.add(nn.Conv2D(channels, kernel_size=1, padding=0))
            self.se.add(nn.Activation("sigmoid"))

    def hybrid_forward(self, F, x):
        x = self.bn(self.conv(x))
        w = F.contrib.AdaptiveAvgPooling2D(x, output_size=1)
        x = F.broadcast_mul(x, self.se(w))
        return x, F.contrib.AdaptiveAvgPooling2D(x, output_size=(2, 3)), \
            F.contrib.AdaptiveAvgPooling2D(x, output_size=3)


def gluoncv_se(w):
    w.gluon("gluoncv_se_adaptive", SEBlock(8), {"data": make_input((1, 3, 6, 9))},
            "dmlc/gluon-cv gluoncv/model_zoo/resnext.py (0.10.5), the block with use_se "
            "(SE-ResNeXt; senet.py's SENet-154 squeezes the same way): "
            "contrib.AdaptiveAvgPooling2D(x, output_size=1); and output sizes (2, 3) and 3 "
            "that divide the 6 x 9 input")


class PyramidHead(nn.HybridBlock):
    """GluonCV's PSPNet pyramid pooling and its segmentation heads' resizing."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.stem = nn.Conv2D(8, 3, padding=1)
            self.branches = nn.HybridSequential()
            for _ in range(4):
                self.branches.add(nn.Conv2D(2, 1))
            self.head = nn.Conv2D(3, 3, padding=1)

    def hybrid_forward(self, F, x):
        feat = self.stem(x)
        pooled = [F.contrib.BilinearResize2D(branch(F.contrib.AdaptiveAvgPooling2D(
            feat, output_size=size)), height=12, width=12)
            for size, branch in zip((1, 2, 3, 6), self.branches)]
        y = self.head(F.concat(feat, *pooled, dim=1))
        return (F.contrib.BilinearResize2D(y, height=31, width=40),
                F.contrib.BilinearResize2D(y, scale_height=1.5, scale_width=2.6),
                F.contrib.BilinearResize2D(y, F.Pooling(x, kernel=(3, 3), stride=(3, 3)),
                                           mode="like"))


def gluoncv_segmentation(w):
    w.gluon("gluoncv_pyramid_resize", PyramidHead(), {"data": make_input((1, 3, 12, 12))},
            "dmlc/gluon-cv gluoncv/model_zoo/pspnet.py (0.10.5): _PyramidPooling "
            "(AdaptiveAvgPooling2D to 1, 2, 3, 6, then contrib.BilinearResize2D(height, "
            "width)) and the heads' resizing to the image (fcn.py, deeplabv3.py); scales and "
            "mode like")


def fcn_xs(w):
    """FCN-xs upsampling: Deconvolution with adj larger than pad, then Crop to the data."""
    S = mx.sym
    data = S.var("data")
    x = S.Convolution(data, kernel=(3, 3), pad=(1, 1), num_filter=4, name="conv1")
    x = S.Activation(x, act_type="relu", name="relu1")
    x = S.Pooling(x, pool_type="max", kernel=(2, 2), stride=(2, 2), name="pool1")
    x = S.Pooling(x, pool_type="max", kernel=(2, 2), stride=(2, 2), name="pool2")
    score = S.Convolution(x, kernel=(1, 1), num_filter=3, name="score")
    big = S.Deconvolution(score, kernel=(8, 8), stride=(4, 4), adj=(3, 3), num_filter=3,
                          no_bias=True, name="bigscore")
    upscore = S.Crop(big, data, offset=(2, 2), name="upscore")
    score2 = S.Deconvolution(score, kernel=(4, 4), stride=(2, 2), adj=(1, 1), num_filter=3,
                             no_bias=False, name="score2")
    rect = S.Deconvolution(score, kernel=(3, 2), stride=(2, 3), pad=(0, 1), adj=(1, 2),
                           num_filter=2, no_bias=False, name="rect")
    w.symbol("fcn_xs_deconv_adj", S.Group([upscore, big, score2, rect]),
             {"data": make_input((1, 3, 21, 22))},
             "apache/mxnet example/fcn-xs/symbol_fcnxs.py (v1.9.x): fcnxs_score's "
             "Deconvolution(kernel 64, stride 32, adj 31) and Crop(bigscore, data, offset), "
             "get_fcn8s_symbol's Deconvolution(kernel 4, stride 2, adj 1), scaled down; and a "
             "rectangular one with a bias")


def params_types(w):
    """One array of each element type MXNet 1.9.1 writes, and what MXNet reads back."""
    from mxnet.ndarray.ndarray import _DTYPE_NP_TO_MX
    bfloat16 = [k for k, v in _DTYPE_NP_TO_MX.items() if v == 12][0]
    base = np.array([[1.5, -2.25, 3.0e-3], [65504.0, 1e-20, -7.0]], np.float32)
    arrays = {"arg:float32": mx.nd.array(base),
              "arg:float16": mx.nd.array(base, dtype="float16"),
              "arg:float64": mx.nd.array(base.astype(np.float64) / 3.0, dtype="float64"),
              "arg:bfloat16": mx.nd.amp_cast(mx.nd.array(base), dtype=bfloat16),
              "aux:uint8": mx.nd.array([0, 7, 255], dtype="uint8"),
              "aux:int8": mx.nd.array([-128, 0, 127], dtype="int8"),
              "aux:int32": mx.nd.array([-70000, 0, 70000], dtype="int32"),
              "aux:int64": mx.nd.array([-5, 0, 2 ** 40], dtype="int64"),
              "aux:bool": mx.nd.array([1, 0, 1], dtype="bool")}
    mx.nd.save(w.path("params_types.params"), arrays)
    back = mx.nd.load(w.path("params_types.params"))
    values = {}
    for key, arr in back.items():
        f32 = mx.nd.amp_cast(arr, dtype="float32") if arr.dtype == bfloat16 else arr
        values[key] = {"shape": list(arr.shape),
                       "values": f32.asnumpy().astype(np.float64).ravel().tolist()}
    with open(w.path("params_types.json"), "w") as f:
        json.dump(values, f, indent=1, sort_keys=True)
    print("params_types           %d arrays" % len(values))


def main(argv):
    out = argv[1] if len(argv) > 1 else os.path.join("tests", "fixtures", "mxnet_real")
    if os.environ.get("MXNET_SUBGRAPH_BACKEND") != "NONE":
        sys.exit("run with MXNET_SUBGRAPH_BACKEND=NONE (see tools/mxnet_reference.py)")
    mx.random.seed(31)
    w = Writer(out)
    gluon_prelu(w)
    alexnet_lrn(w)
    params_types(w)
    gluoncv_se(w)
    fcn_xs(w)
    gluoncv_segmentation(w)
    with open(w.path("manifest.json"), "w") as f:
        json.dump(w.manifest, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main(sys.argv)
