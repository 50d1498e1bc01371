#!/usr/bin/env python
"""Write the MXNet reference models and outputs that ``tests/test_mxnet_import.py`` reads.

Needs MXNet 1.9.1 (``pip install mxnet==1.9.1 "numpy<1.24"`` in a venv of its own: it does not
fit beside the project's NumPy) and runs without pycaffe-lite::

    MXNET_SUBGRAPH_BACKEND=NONE python tools/mxnet_reference.py tests/fixtures/mxnet
    MXNET_SUBGRAPH_BACKEND=NONE python tools/mxnet_reference.py /tmp/mxnet-full --full

``MXNET_SUBGRAPH_BACKEND=NONE`` matters: MXNet's oneDNN pass fuses Convolution + BatchNorm +
ReLU in a bound executor even where the convolution's raw output also feeds a shortcut, and
then gives that shortcut the fused value.

Each case is a model with random weights (random BatchNorm statistics, gamma and beta, so
``fix_gamma`` and ``eps`` show), exported as MXNet writes it (``NAME-symbol.json`` and
``NAME-0000.params``: Gluon's ``hybridize(); forward; export()``, or the symbol API's
``save_checkpoint``), an input, and MXNet's outputs computed from the exported files by a
bound executor. The Gluon model-zoo classes are built as written but narrow: their
``Conv2D``/``Dense`` widths divided while they are constructed (or their own width
arguments), so the files stay small. ``manifest.json`` lists every case: its inputs (name,
shape, .npy file stored as float16, every value of which MXNet was given exactly), its
output files, and the cases that MXNet runs but Caffe cannot express (``expect_error``).
The random numbers are seeded: running it again writes the same files.

``--full`` writes the zoo models at full width instead (about 1 GB, never committed); the tests
compare with them too when ``PYCAFFE_LITE_MXNET_REFERENCES`` names that directory.
"""

import contextlib
import json
import math
import os
import subprocess
import sys

import mxnet as mx
import numpy as np
from mxnet import gluon
from mxnet.gluon import nn
from mxnet.gluon.model_zoo import vision

RNG = np.random.RandomState(23)


# ---- helpers ------------------------------------------------------------------------------
def randomize(params):
    """Random values for every parameter: weights by fan-in, BatchNorm's four arrays spread
    out so that gamma, eps and the statistics all matter."""
    for name, p in sorted(params.items()):
        shape = p.shape
        if name.endswith(("gamma",)) and len(shape) == 1 and "prelu" not in name \
                and "alpha" not in name:
            v = RNG.uniform(0.5, 1.5, shape)
        elif name.endswith(("beta", "bias")):
            v = RNG.normal(0, 0.2, shape)
        elif name.endswith(("running_mean", "moving_mean")):
            v = RNG.normal(0, 0.2, shape)
        elif name.endswith(("running_var", "moving_var")):
            v = RNG.uniform(0.3, 1.5, shape)
        elif len(shape) == 1:  # PReLU slopes and the like
            v = RNG.uniform(0.05, 0.4, shape)
        else:
            fan_in = int(np.prod(shape[1:])) or 1
            v = RNG.normal(0, math.sqrt(2.0 / fan_in), shape)
        p.set_data(mx.nd.array(v.astype(np.float32)))


def make_input(shape, scale=1.0):
    """A float32 input whose values are float16-exact (stored as float16)."""
    return (RNG.normal(0, scale, shape)).astype(np.float16).astype(np.float32)


@contextlib.contextmanager
def narrow(div, keep=()):
    """While a zoo class is built: Conv2D and Dense widths above 16 divided by ``div``
    (depthwise groups with them), widths in ``keep`` (the classes) untouched."""
    conv, dense = nn.Conv2D, nn.Dense

    def width(c):
        return c if c <= 16 or c in keep else max(4, c // div)

    def conv2d(channels, *args, **kwargs):
        if kwargs.get("groups", 1) == channels and channels > 1:
            kwargs["groups"] = width(channels)
        return conv(width(channels), *args, **kwargs)

    def dense_(units, *args, **kwargs):
        return dense(width(units), *args, **kwargs)

    nn.Conv2D, nn.Dense = conv2d, dense_
    try:
        yield
    finally:
        nn.Conv2D, nn.Dense = conv, dense


class Writer:
    def __init__(self, out):
        self.out = out
        self.manifest = {}
        self.saved = []
        os.makedirs(out, exist_ok=True)

    def _inputs(self, name, inputs):
        entry = {}
        for key, arr in inputs.items():
            fname = "%s-in-%s.npy" % (name, key)
            for old, known in self.saved:  # one file for an input two cases share
                if known.shape == arr.shape and np.array_equal(known, arr):
                    fname = old
                    break
            else:
                np.save(os.path.join(self.out, fname), arr.astype(np.float16))
                self.saved.append((fname, arr))
            entry[key] = {"shape": list(arr.shape), "file": fname}
        return entry

    def run_files(self, name, inputs):
        """MXNet's outputs from the exported files (a bound executor, inference)."""
        sym = mx.sym.load(os.path.join(self.out, name + "-symbol.json"))
        saved = mx.nd.load(os.path.join(self.out, name + "-0000.params"))
        saved = saved if isinstance(saved, dict) else {}  # an empty file loads as a list
        args = {k[4:]: v for k, v in saved.items() if k.startswith("arg:")}
        aux = {k[4:]: v for k, v in saved.items() if k.startswith("aux:")}
        for key, arr in inputs.items():
            args[key] = mx.nd.array(arr)
        needed = set(sym.list_arguments())
        shapes, _, _ = sym.infer_shape_partial(**{k: v.shape for k, v in args.items()
                                                  if k in needed})
        for key, shape in zip(sym.list_arguments(), shapes):
            if key not in args:  # labels of loss heads: not read at inference
                args[key] = mx.nd.zeros(shape)
        args = {k: v for k, v in args.items() if k in needed}
        exe = sym.bind(mx.cpu(), args, aux_states={k: aux[k] for k in sym.list_auxiliary_states()},
                       grad_req="null")
        return [o.asnumpy() for o in exe.forward(is_train=False)]

    def run_native(self, name, inputs):
        """:meth:`run_files` in a second process with MXNet's own kernels
        (``MXNET_MKLDNN_ENABLED=0``, read once per process: the kernels its GPU build mirrors)."""
        given = os.path.join(self.out, "_native-in.npz")
        got = os.path.join(self.out, "_native-out.npz")
        np.savez(given, **{"in_" + k: v for k, v in inputs.items()})  # (savez drops 'like')
        try:
            env = dict(os.environ, MXNET_MKLDNN_ENABLED="0")
            subprocess.run([sys.executable, os.path.abspath(__file__), self.out, "--run-native",
                            name], env=env, check=True)
            with np.load(got) as z:
                return [z["arr_%d" % i] for i in range(len(z.files))]
        finally:
            for path in (given, got):
                if os.path.exists(path):
                    os.remove(path)

    def record(self, name, inputs, outputs=None, note="", expect_error=None, native=False):
        if outputs is None:
            outputs = (self.run_native if native else self.run_files)(name, inputs)
        files = []
        for i, arr in enumerate(outputs):
            fname = "%s-out%d.npy" % (name, i)
            np.save(os.path.join(self.out, fname), arr.astype(np.float32))
            files.append(fname)
        entry = {"inputs": self._inputs(name, inputs), "outputs": files, "note": note}
        if expect_error:
            entry["expect_error"] = expect_error
        self.manifest[name] = entry
        print("%-22s outputs %s" % (name, [tuple(o.shape) for o in outputs]))

    def gluon(self, name, net, inputs, note=""):
        net.initialize(mx.init.Xavier())
        net.hybridize()
        arrays = [mx.nd.array(a) for a in inputs.values()]
        net(*arrays)
        randomize(net.collect_params())
        net(*arrays)
        net.export(os.path.join(self.out, name))
        self.record(name, inputs, note=note)

    def symbol(self, name, sym, inputs, shapes=None, extra_params=None, note="",
               expect_error=None, label_shapes=None, native=False):
        """A symbol-API model with random parameters, saved by ``save_checkpoint``;
        ``native``: its outputs from MXNet's own kernels (:meth:`run_native`)."""
        shapes = dict(shapes or {k: v.shape for k, v in inputs.items()})
        shapes.update(label_shapes or {})
        arg_shapes, _, aux_shapes = sym.infer_shape(**shapes)
        args, aux = {}, {}
        for key, shape in zip(sym.list_arguments(), arg_shapes):
            if key not in shapes:
                args[key] = mx.nd.array(self._param(key, shape))
        for key, shape in zip(sym.list_auxiliary_states(), aux_shapes):
            aux[key] = mx.nd.array(self._param(key, shape))
        for key, shape in (extra_params or {}).items():
            args[key] = mx.nd.array(self._param(key, shape))
        mx.model.save_checkpoint(os.path.join(self.out, name), 0, sym, args, aux)
        self.record(name, inputs, note=note, expect_error=expect_error, native=native)

    @staticmethod
    def _param(key, shape):
        holder = {key: gluon.Parameter(key, shape=shape)}
        holder[key].initialize(mx.init.Zero())
        randomize(holder)
        return holder[key].data().asnumpy()

    def save_manifest(self):
        with open(os.path.join(self.out, "manifest.json"), "w") as f:
            json.dump(self.manifest, f, indent=1, sort_keys=True)


# ---- the Gluon model zoo ------------------------------------------------------------------
def zoo(w):
    x = {"data": make_input((1, 3, 64, 64))}
    w.gluon("resnet18_v1_narrow", vision.ResNetV1(vision.BasicBlockV1, [1, 1, 1],
                                                 [8, 8, 16, 32], classes=10), x,
            "ResNet v1 (BasicBlockV1), channels 8-32; max pool 32 -> 16 rounds down")
    w.gluon("resnet50_v2_narrow", vision.ResNetV2(vision.BottleneckV2, [1, 1],
                                                 [8, 16, 32], classes=10), x,
            "ResNet v2 (BottleneckV2): BatchNorm(scale=False, center=False) on the data")
    w.gluon("resnet50_v1_narrow", vision.ResNetV1(vision.BottleneckV1, [1, 1],
                                                 [8, 16, 32], classes=10),
            {"data": make_input((1, 3, 45, 45))}, "ResNet v1 bottleneck on an odd size")
    small = {"data": make_input((1, 3, 32, 32))}
    w.gluon("mobilenet_v1_narrow", vision.MobileNet(multiplier=0.125, classes=10), small,
            "MobileNet v1, multiplier 0.125")
    with narrow(8, keep=(10,)):
        w.gluon("mobilenet_v2_narrow", vision.MobileNetV2(multiplier=0.25, classes=10), small,
                "MobileNet v2, multiplier 0.25 and widths / 8 (clip = ReLU6)")
    big = {"data": make_input((1, 3, 224, 224))}
    with narrow(8, keep=(10,)):
        w.gluon("squeezenet1_0_narrow", vision.SqueezeNet("1.0", classes=10), big,
                "SqueezeNet 1.0, widths / 8: ceil_mode max pools (pooling_convention full)")
        w.gluon("squeezenet1_1_narrow", vision.SqueezeNet("1.1", classes=10), big,
                "SqueezeNet 1.1, widths / 8")
    w.gluon("densenet_narrow", vision.DenseNet(8, 4, [2, 2, 2], bn_size=2, classes=10),
            {"data": make_input((1, 3, 112, 112))},
            "DenseNet, 8 initial features, growth 4, blocks 2-2-2, input 112")
    with narrow(32, keep=(10,)):
        w.gluon("vgg11_bn_narrow", vision.VGG([1, 1, 2, 2, 2], [64, 128, 256, 512, 512],
                                              classes=10, batch_norm=True), small,
                "VGG-11 with BatchNorm, widths / 32 (Dense 4096 -> 128)")
        w.gluon("alexnet_narrow", vision.AlexNet(classes=10),
                {"data": make_input((1, 3, 67, 67))}, "AlexNet, widths / 32, input 67")
    with narrow(32, keep=(10,)):
        w.gluon("inception_v3_narrow", vision.Inception3(classes=10),
                {"data": make_input((1, 3, 299, 299))},
                "Inception v3 (BatchNorm eps 1e-3), widths / 32")


# ---- InsightFace-style and squeeze-excitation (symbol API / own blocks) ---------------------
def insightface(w):
    """A face-embedding net built the way InsightFace's symbol scripts build theirs."""
    S = mx.sym
    data = S.var("data")
    x = S._internal._minus_scalar(data, scalar=127.5, name="minus0")
    x = S._internal._mul_scalar(x, scalar=0.0078125, name="mul0")
    x = S.Convolution(x, num_filter=8, kernel=(3, 3), stride=(1, 1), pad=(1, 1),
                      no_bias=True, name="conv0")
    x = S.BatchNorm(x, fix_gamma=False, eps=2e-5, momentum=0.9, name="bn0")
    x = S.LeakyReLU(x, act_type="prelu", name="relu0")
    for i, (c, s) in enumerate([(8, 2), (16, 2)]):
        b = S.BatchNorm(x, fix_gamma=False, eps=2e-5, name="stage%d_bn1" % i)
        b = S.Convolution(b, num_filter=c, kernel=(3, 3), pad=(1, 1), no_bias=True,
                          name="stage%d_conv1" % i)
        b = S.BatchNorm(b, fix_gamma=False, eps=2e-5, name="stage%d_bn2" % i)
        b = S.LeakyReLU(b, act_type="prelu", name="stage%d_relu1" % i)
        b = S.Convolution(b, num_filter=c, kernel=(3, 3), stride=(s, s), pad=(1, 1),
                          no_bias=True, name="stage%d_conv2" % i)
        b = S.BatchNorm(b, fix_gamma=False, eps=2e-5, name="stage%d_bn3" % i)
        sc = S.Convolution(x, num_filter=c, kernel=(1, 1), stride=(s, s), no_bias=True,
                           name="stage%d_conv1sc" % i)
        sc = S.BatchNorm(sc, fix_gamma=False, eps=2e-5, name="stage%d_sc" % i)
        x = b + sc
    x = S.BatchNorm(x, fix_gamma=False, eps=2e-5, name="bn1")
    x = S.Dropout(x, p=0.4)
    x = S.FullyConnected(x, num_hidden=16, name="pre_fc1")
    x = S.BatchNorm(x, fix_gamma=True, eps=2e-5, name="fc1")
    x = S.L2Normalization(x, mode="instance", name="norm")
    data_in = {"data": np.round(RNG.uniform(0, 255, (2, 3, 28, 28))).astype(np.float32)}
    w.symbol("insightface_narrow", x, data_in, extra_params={"fc7_weight": (5, 16)},
             note="scalar pre-processing, PReLU, BatchNorm fix_gamma on the embedding, an "
                  "unused fc7_weight in the params")


class SEBlock(gluon.HybridBlock):
    def __init__(self, channels, reduction, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.conv = nn.Conv2D(channels, 3, padding=1, use_bias=False)
            self.bn = nn.BatchNorm()
            self.fc1 = nn.Conv2D(channels // reduction, 1)
            self.fc2 = nn.Dense(channels)

    def hybrid_forward(self, F, x):
        y = F.Activation(self.bn(self.conv(x)), act_type="relu")
        s = F.Pooling(y, kernel=(1, 1), global_pool=True, pool_type="avg")
        s = F.Activation(self.fc1(s), act_type="relu")
        s = F.sigmoid(self.fc2(s))
        s = F.reshape(s, shape=(0, 0, 1, 1))
        return F.broadcast_mul(y, s) + x


class SENet(gluon.HybridBlock):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.stem = nn.Conv2D(8, 3, padding=1)
            self.se1 = SEBlock(8, 2)
            self.se2 = SEBlock(8, 4)
            self.pool = nn.GlobalAvgPool2D()
            self.out = nn.Dense(5)

    def hybrid_forward(self, F, x):
        return self.out(self.pool(self.se2(self.se1(self.stem(x)))))


# ---- symbol-API cases for what the zoo does not exercise -----------------------------------
def pooling(w):
    S = mx.sym
    d = S.var("data")
    outs = []
    for conv in ("valid", "full"):
        for pt in ("max", "avg", "sum"):
            outs.append(S.Pooling(d, kernel=(3, 3), stride=(2, 2), pool_type=pt,
                                  pooling_convention=conv, name="p_%s_%s" % (pt, conv)))
    for incl in (True, False):
        outs.append(S.Pooling(d, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg",
                              count_include_pad=incl, name="p_avgpad_%d" % incl))
        outs.append(S.Pooling(d, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="avg",
                              pooling_convention="full", count_include_pad=incl,
                              name="p_avgfull_%d" % incl))
        outs.append(S.Pooling(d, kernel=(3, 2), stride=(3, 2), pad=(1, 1), pool_type="avg",
                              count_include_pad=incl, name="p_avgrect_%d" % incl))
    outs.append(S.Pooling(d, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max",
                          name="p_maxpad_valid"))
    outs.append(S.Pooling(d, kernel=(3, 3), stride=(2, 2), pad=(1, 1), pool_type="max",
                          pooling_convention="full", name="p_maxpad_full"))
    for pt in ("max", "avg", "sum"):
        outs.append(S.Pooling(d, kernel=(1, 1), global_pool=True, pool_type=pt,
                              name="p_global_%s" % pt))
    w.symbol("pooling_odd", S.Group(outs), {"data": make_input((1, 2, 11, 13))},
             note="valid/full conventions, max/avg/sum, count_include_pad, global")
    bad = S.Pooling(d, kernel=(2, 2), stride=(2, 2), pad=(1, 1), pool_type="max",
                    pooling_convention="full", name="p_full_pad_window")
    w.symbol("pooling_full_padding_window", bad, {"data": make_input((1, 2, 5, 5))},
             note="full convention: MXNet keeps a last window that starts in the padding",
             expect_error="p_full_pad_window")


def deconv_upsampling(w):
    S = mx.sym
    d = S.var("data")
    outs = [
        S.Deconvolution(d, num_filter=3, kernel=(3, 3), stride=(2, 2), pad=(1, 1),
                        adj=(1, 1), name="deconv_adj"),
        S.Deconvolution(d, num_filter=4, kernel=(4, 4), stride=(2, 2), pad=(1, 1),
                        no_bias=False, num_group=2, name="deconv_group_bias"),
        S.Deconvolution(d, num_filter=2, kernel=(3, 2), stride=(2, 3), pad=(1, 0),
                        adj=(1, 0), name="deconv_rect"),
        S.UpSampling(d, scale=2, sample_type="nearest", name="up_nearest"),
        S.UpSampling(d, S.var("up_bilinear_weight"), scale=2, sample_type="bilinear",
                     num_filter=4, name="up_bilinear"),
        S.UpSampling(d, scale=3, sample_type="bilinear", num_filter=4, name="up_bilinear3"),
    ]
    w.symbol("deconv_upsampling", S.Group(outs), {"data": make_input((1, 4, 5, 6))},
             note="Deconvolution adj / target_shape / groups, UpSampling nearest and bilinear")


def deconv_target(w):
    """Deconvolution's target_shape (MXNet's oneDNN kernel refuses the geometry it chooses:
    this case runs with MXNET_MKLDNN_ENABLED=0, MXNet's own kernels)."""
    S = mx.sym
    d = S.var("data")
    outs = [S.Deconvolution(d, num_filter=2, kernel=(3, 3), stride=(2, 2), target_shape=t,
                            name="deconv_target%d" % i)
            for i, t in enumerate([(10, 12), (11, 13), (9, 11)])]
    w.symbol("deconv_target", S.Group(outs), {"data": make_input((1, 4, 5, 6))},
             note="Deconvolution target_shape (pad and adj chosen by MXNet)")


def ops(w):
    S = mx.sym
    d = S.var("data")
    outs = [S.Activation(d, act_type=a, name="act_" + a)
            for a in ("relu", "sigmoid", "tanh", "softrelu", "softsign")]
    outs += [S.LeakyReLU(d, name="leaky_default"),
             S.LeakyReLU(d, act_type="leaky", slope=0.1, name="leaky"),
             S.LeakyReLU(d, act_type="elu", slope=0.3, name="elu"),
             S.LeakyReLU(d, act_type="selu", name="selu"),
             S.LeakyReLU(d, act_type="rrelu", lower_bound=0.1, upper_bound=0.3, name="rrelu")[0],
             S.LeakyReLU(d, act_type="prelu", name="prelu"),
             S.clip(d, -0.5, 0.7, name="clip"), S.clip(d, 0, 6, name="relu6"),
             S.sigmoid(d, name="sigmoid_op"), S.relu(d, name="relu_op"),
             S.tanh(d, name="tanh_op")]
    w.symbol("activations", S.Group(outs), {"data": make_input((2, 3, 4, 5), 2.0)},
             note="Activation and LeakyReLU modes, clip")
    w.symbol("gelu", S.LeakyReLU(d, act_type="gelu", name="gelu"),
             {"data": make_input((2, 3, 4, 5), 2.0)}, note="LeakyReLU gelu (erf form)")

    outs = [S.softmax(d, name="softmax_default"), S.softmax(d, axis=1, name="softmax_axis1"),
            S.softmax(d, temperature=2.0, name="softmax_temp"),
            S.log_softmax(d, name="log_softmax"),
            S.SoftmaxActivation(d, name="softmax_instance"),
            S.SoftmaxActivation(d, mode="channel", name="softmax_channel"),
            S.SoftmaxOutput(d, S.var("label"), multi_output=True, name="softmax_multi"),
            S.SoftmaxOutput(d, S.var("label2"), name="softmax_out"),
            S.SoftmaxOutput(d, S.var("label3"), preserve_shape=True, name="softmax_keep")]
    w.symbol("softmaxes", S.Group(outs), {"data": make_input((2, 3, 4, 5), 2.0)},
             label_shapes={"label": (2, 4, 5), "label2": (2, 3, 4), "label3": (2, 3, 4)},
             native=True,  # (oneDNN's SoftmaxOutput of a 4-D blob softmaxes the last axis)
             note="softmax axis -1 by default, SoftmaxActivation modes, SoftmaxOutput")

    b = S.var("other")
    pooled = S.Pooling(d, kernel=(1, 1), global_pool=True, pool_type="avg", name="gap")
    outs = [S.elemwise_add(d, b, name="ew_add"), S._internal._Plus(d, b, name="plus"),
            S.add_n(d, b, d, name="add_n"), S.broadcast_add(d, b, name="bc_add"),
            S.elemwise_mul(d, b, name="ew_mul"), S.broadcast_mul(d, pooled, name="bc_mul"),
            S.broadcast_mul(pooled, d, name="bc_mul_rev"), S.elemwise_sub(d, b, name="ew_sub"),
            S.broadcast_add(d, pooled, name="bc_add_channels"),
            S._internal._plus_scalar(d, scalar=1.5, name="plus_s"),
            S._internal._minus_scalar(d, scalar=0.5, name="minus_s"),
            S._internal._rminus_scalar(d, scalar=2.0, name="rminus_s"),
            S._internal._mul_scalar(d, scalar=-3.0, name="mul_s"),
            S._internal._div_scalar(d, scalar=4.0, name="div_s"),
            S._internal._rdiv_scalar(S.abs(d) + 1.0, scalar=2.0, name="rdiv_s"),
            S.abs(d, name="abs"), S.exp(d * 0.5, name="exp"),
            S.log(S.abs(d) + 0.5, name="log")]
    w.symbol("arithmetic", S.Group(outs), {"data": make_input((2, 3, 4, 5)),
                                           "other": make_input((2, 3, 4, 5))},
             note="element-wise, broadcast (squeeze-excitation shape) and scalar ops")

    x = S.var("data")
    outs = [S.FullyConnected(x, num_hidden=7, name="fc_flat"),
            S.FullyConnected(x, num_hidden=6, flatten=False, name="fc_noflat"),
            S.FullyConnected(x, num_hidden=5, no_bias=True, name="fc_nobias"),
            S.Flatten(x, name="flatten"),
            S.Reshape(x, shape=(0, -1), name="reshape_0m1"),
            S.Reshape(x, shape=(-3, -2), name="reshape_m3"),
            S.Reshape(x, shape=(0, -4, 3, -1, -2), name="reshape_m4"),
            S.Reshape(x, shape=(-1, 0), reverse=True, name="reshape_rev"),
            S.Reshape(x, shape=(2, 6, 20), name="reshape_plain"),
            S.transpose(x, axes=(0, 2, 3, 1), name="transpose"),
            S.slice_axis(x, axis=1, begin=1, end=4, name="slice1"),
            S.slice_axis(x, axis=-1, begin=-3, end=None, name="slice_last"),
            S.Concat(x, S.relu(x), dim=1, name="concat"),
            S.Concat(x, x, dim=3, name="concat3"),
            S.mean(x, axis=(2, 3), name="mean_hw"),
            S.sum(x, axis=(2, 3), keepdims=True, name="sum_keep"),
            S.mean(x, axis=(1, 2, 3), name="mean_chw"),
            S.L2Normalization(x, mode="instance", name="l2_instance"),
            S.L2Normalization(x, mode="channel", name="l2_channel"),
            S.L2Normalization(x, mode="spatial", eps=1e-6, name="l2_spatial"),
            S.BlockGrad(x, name="blockgrad") * 2.0, S.identity(x, name="identity") + 1.0,
            S._internal._copy(x, name="copy") - 1.0,
            S.Crop(x, S.var("like"), name="crop_like"),
            S.Crop(x, offset=(1, 2), h_w=(2, 3), name="crop_hw"),
            S.Crop(x, S.var("like"), center_crop=True, name="crop_center"),
            S.Dropout(x, p=0.5, name="dropout")]
    sl = S.SliceChannel(x, num_outputs=3, axis=1, name="slicechannel")
    outs += [sl[0], sl[2]]
    sq = S.split(x, num_outputs=4, axis=2, squeeze_axis=True, name="split_squeeze")
    outs += [sq[1]]
    w.symbol("shapes", S.Group(outs), {"data": make_input((2, 6, 4, 5)),
                                       "like": make_input((1, 1, 3, 3))},
             note="FullyConnected flatten, Reshape codes, transpose, slices, reductions, "
                  "L2Normalization, Crop")

    c = [S.Convolution(d, num_filter=6, kernel=(3, 3), dilate=(2, 2), pad=(2, 2),
                       num_group=3, name="conv_dil_group"),
         S.Convolution(d, num_filter=4, kernel=(3, 1), stride=(2, 1), pad=(1, 0),
                       no_bias=True, name="conv_rect"),
         S.Convolution(d, num_filter=3, kernel=(1, 1), workspace=64, cudnn_off=True,
                       name="conv_1x1"),
         S.BatchNorm(d, name="bn_defaults"),
         S.BatchNorm(d, fix_gamma=False, eps=1e-4, name="bn_free"),
         S.BatchNorm(d, fix_gamma=False, use_global_stats=True, name="bn_global")]
    w.symbol("conv_bn", S.Group(c), {"data": make_input((1, 3, 9, 8))},
             note="dilated grouped and rectangular convolutions, BatchNorm defaults "
                  "(fix_gamma=True, eps=1e-3)")


def legacy_json(w):
    """A symbol file in the pre-1.0 layout (``param`` and ``attr`` keys), as old model-zoo
    files have it; MXNet 1.9.1 reads it and gives the reference."""
    nodes = [
        {"op": "null", "param": {}, "name": "data", "inputs": [], "backward_source_id": -1},
        {"op": "null", "param": {}, "name": "conv_weight", "inputs": [],
         "backward_source_id": -1},
        {"op": "null", "param": {}, "name": "conv_bias", "inputs": [], "backward_source_id": -1},
        {"op": "Convolution", "param": {"kernel": "(3, 3)", "num_filter": "4", "pad": "(1, 1)",
                                        "stride": "(1, 1)", "no_bias": "False",
                                        "workspace": "512", "dilate": "(1, 1)",
                                        "num_group": "1", "cudnn_tune": "off"},
         "name": "conv", "inputs": [[0, 0], [1, 0], [2, 0]], "backward_source_id": -1},
        {"op": "null", "param": {}, "name": "bn_gamma", "inputs": [], "backward_source_id": -1},
        {"op": "null", "param": {}, "name": "bn_beta", "inputs": [], "backward_source_id": -1},
        {"op": "BatchNorm", "param": {"eps": "0.001", "fix_gamma": "True",
                                      "momentum": "0.9", "use_global_stats": "False"},
         "name": "bn", "inputs": [[3, 0], [4, 0], [5, 0]], "backward_source_id": -1,
         "attr": {"ctx_group": "stage1"}},
        {"op": "Activation", "param": {"act_type": "relu"}, "name": "relu",
         "inputs": [[6, 0]], "backward_source_id": -1},
        {"op": "Pooling", "param": {"kernel": "(3, 3)", "pool_type": "max", "stride": "(2, 2)",
                                    "pad": "(0, 0)", "pooling_convention": "full"},
         "name": "pool", "inputs": [[7, 0]], "backward_source_id": -1},
        {"op": "Flatten", "param": {}, "name": "flatten", "inputs": [[8, 0]],
         "backward_source_id": -1},
        {"op": "null", "param": {}, "name": "fc_weight", "inputs": [], "backward_source_id": -1},
        {"op": "null", "param": {}, "name": "fc_bias", "inputs": [], "backward_source_id": -1},
        {"op": "FullyConnected", "param": {"num_hidden": "3", "no_bias": "False"},
         "name": "fc", "inputs": [[9, 0], [10, 0], [11, 0]], "backward_source_id": -1},
    ]
    doc = {"nodes": nodes, "arg_nodes": [0, 1, 2, 4, 5, 10, 11], "heads": [[12, 0]]}
    with open(os.path.join(w.out, "legacy_json-symbol.json"), "w") as f:
        json.dump(doc, f, indent=1)
    sym = mx.sym.load(os.path.join(w.out, "legacy_json-symbol.json"))
    x = {"data": make_input((1, 2, 8, 8))}
    arg_shapes, _, aux_shapes = sym.infer_shape(data=x["data"].shape)
    args = {k: mx.nd.array(w._param(k, s)) for k, s in zip(sym.list_arguments(), arg_shapes)
            if k != "data"}
    aux = {k: mx.nd.array(w._param(k, s))
           for k, s in zip(sym.list_auxiliary_states(), aux_shapes)}
    mx.nd.save(os.path.join(w.out, "legacy_json-0000.params"),
               dict([("arg:" + k, v) for k, v in args.items()] +
                    [("aux:" + k, v) for k, v in aux.items()]))
    w.record("legacy_json", x, note="pre-1.0 symbol JSON (param/attr keys), ceil pooling")


def unsupported(w):
    S = mx.sym
    d = S.var("data")
    y = S.topk(d, k=2, axis=1, name="top")
    y = S.Convolution(y, num_filter=2, kernel=(1, 1), name="conv")
    y = S.where(y > 0, y, S.sin(y, name="sine"), name="select") + S.erf(y, name="erf1")
    y = S.Pooling(y, kernel=(2, 2), pool_type="lp", p_value=2, name="lp_pool")
    y.save(os.path.join(w.out, "unsupported-symbol.json"))


def zoo_full(w):
    """The zoo models at full width (hundreds of MB: for a directory outside the repository,
    read by the tests when PYCAFFE_LITE_MXNET_REFERENCES names it)."""
    x224 = {"data": make_input((1, 3, 224, 224))}
    for name, net in (("resnet50_v1", vision.resnet50_v1()),
                      ("resnet101_v2", vision.resnet101_v2()),
                      ("mobilenet1_0", vision.mobilenet1_0()),
                      ("mobilenet_v2_1_0", vision.mobilenet_v2_1_0()),
                      ("squeezenet1_0", vision.squeezenet1_0()),
                      ("densenet121", vision.densenet121()),
                      ("vgg16_bn", vision.vgg16_bn()),
                      ("alexnet", vision.alexnet())):
        w.gluon(name, net, x224, "the Gluon model zoo's %s at full width" % name)
    w.gluon("inception_v3", vision.inception_v3(), {"data": make_input((1, 3, 299, 299))},
            "the Gluon model zoo's Inception v3 at full width")


def main(argv):
    default = os.path.join("tests", "fixtures", "mxnet")
    out = argv[1] if len(argv) > 1 and not argv[1].startswith("--") else default
    if os.environ.get("MXNET_SUBGRAPH_BACKEND") != "NONE":
        sys.exit("run with MXNET_SUBGRAPH_BACKEND=NONE (see the docstring)")
    mx.random.seed(23)
    w = Writer(out)
    if "--run-native" in argv:  # (a process of Writer.run_native)
        name = argv[argv.index("--run-native") + 1]
        with np.load(os.path.join(out, "_native-in.npz")) as z:
            given = {k[3:]: z[k] for k in z.files}
        np.savez(os.path.join(out, "_native-out.npz"), *w.run_files(name, given))
        return
    if "--full" in argv:
        zoo_full(w)
        w.save_manifest()
        return
    if "--native" in argv:
        deconv_target(w)
        with open(os.path.join(out, "manifest-native.json"), "w") as f:
            json.dump(w.manifest, f)
        return
    env = dict(os.environ, MXNET_MKLDNN_ENABLED="0")
    subprocess.run([sys.executable, os.path.abspath(__file__), out, "--native"], env=env,
                   check=True)
    with open(os.path.join(out, "manifest-native.json")) as f:
        w.manifest.update(json.load(f))
    os.remove(os.path.join(out, "manifest-native.json"))
    pooling(w)
    deconv_upsampling(w)
    ops(w)
    legacy_json(w)
    unsupported(w)
    insightface(w)
    w.gluon("se_narrow", SENet(), {"data": make_input((2, 3, 9, 9))},
            "squeeze-excitation blocks: global pool, 1x1 conv / Dense, sigmoid, broadcast_mul")
    zoo(w)
    w.save_manifest()


if __name__ == "__main__":
    main(sys.argv)
