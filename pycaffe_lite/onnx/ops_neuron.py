"""Converters of Caffe's element-wise (neuron) layers and Dropout."""

import math

import numpy as np

from .builder import register_converter


def _affine(call, x, scale, shift, suffix):
    """``shift + scale * x`` with the no-op parts left out."""
    if scale != 1.0:
        x = call.node("Mul", [x, call.const(suffix + "/scale", scale)], suffix=suffix + "_mul")
    if shift != 0.0:
        x = call.node("Add", [x, call.const(suffix + "/shift", shift)], suffix=suffix + "_add")
    return x


@register_converter("ReLU")
def relu(call):
    slope = float(call.param.relu_param.negative_slope)
    if slope:
        call.node("LeakyRelu", call.inputs, call.outputs, alpha=slope)
    else:
        call.node("Relu", call.inputs, call.outputs)


@register_converter("PReLU")
def prelu(call):
    slope = call.blobs[0].reshape(-1)
    rank = len(call.in_shapes[0])
    if call.param.prelu_param.channel_shared:
        shape = [1]
    else:
        # slopes per channel (axis 1), broadcast over the axes after it
        shape = [slope.size] + [1] * max(0, rank - 2)
    call.node("PRelu", [call.inputs[0], call.const("slope", slope.reshape(shape))],
              call.outputs)


@register_converter("ELU")
def elu(call):
    call.node("Elu", call.inputs, call.outputs, alpha=float(call.param.elu_param.alpha))


@register_converter("Sigmoid", "TanH", "AbsVal")
def simple(call):
    op = {"Sigmoid": "Sigmoid", "TanH": "Tanh", "AbsVal": "Abs"}[call.type]
    call.node(op, call.inputs, call.outputs)


@register_converter("BNLL")
def bnll(call):
    # log(1 + exp(x)), which ONNX names Softplus
    call.node("Softplus", call.inputs, call.outputs)


@register_converter("Mish")
def mish(call):
    if call.g.opset >= 18:
        call.node("Mish", call.inputs, call.outputs)
        return
    soft = call.node("Softplus", call.inputs, suffix="softplus")
    th = call.node("Tanh", [soft], suffix="tanh")
    call.node("Mul", [call.inputs[0], th], call.outputs)


@register_converter("Power")
def power(call):
    p = call.param.power_param
    x = _affine(call, call.inputs[0], float(p.scale), float(p.shift), "affine")
    if float(p.power) == 1.0:
        call.node("Identity", [x], call.outputs)
    else:
        call.node("Pow", [x, call.const("power", float(p.power))], call.outputs)


@register_converter("Exp")
def exp(call):
    p = call.param.exp_param
    # base^(shift + scale x) = exp(ln(base) * (shift + scale x)); base -1 means e
    ln_base = 1.0 if float(p.base) == -1.0 else math.log(float(p.base))
    x = _affine(call, call.inputs[0], ln_base * float(p.scale), ln_base * float(p.shift),
                "affine")
    call.node("Exp", [x], call.outputs)


@register_converter("Log")
def log(call):
    p = call.param.log_param
    x = _affine(call, call.inputs[0], float(p.scale), float(p.shift), "affine")
    if float(p.base) == -1.0:
        call.node("Log", [x], call.outputs)
    else:
        ln = call.node("Log", [x], suffix="ln")
        call.node("Mul", [ln, call.const("inv_ln_base", 1.0 / math.log(float(p.base)))],
                  call.outputs)


@register_converter("Threshold")
def threshold(call):
    t = float(call.param.threshold_param.threshold)
    above = call.node("Greater", [call.inputs[0], call.const("threshold", t)], suffix="above")
    call.node("Cast", [above], call.outputs, to=1)  # FLOAT


def _clip(call, lo, hi):
    call.node("Clip", [call.inputs[0], call.const("min", lo), call.const("max", hi)],
              call.outputs)


@register_converter("Clip")
def clip(call):
    _clip(call, float(call.param.clip_param.min), float(call.param.clip_param.max))


@register_converter("ReLU6")
def relu6(call):
    _clip(call, 0.0, 6.0)


@register_converter("Swish")
def swish(call):
    beta = float(call.param.swish_param.beta)
    x = call.inputs[0]
    bx = x if beta == 1.0 else call.node("Mul", [x, call.const("beta", beta)], suffix="beta")
    s = call.node("Sigmoid", [bx], suffix="sigmoid")
    call.node("Mul", [x, s], call.outputs)


@register_converter("Dropout")
def dropout(call):
    p = call.param.dropout_param
    x = call.inputs[0]
    keep = np.float32(1.0 - float(p.dropout_ratio))
    if p.sample_weights_test:
        # Bayesian SegNet's Monte Carlo dropout: a new mask at every run, as in training
        ratio = call.const("ratio", np.float32(p.dropout_ratio))
        sample = call.const("training_mode", np.array(True), np.bool_)
        if p.scale_train:
            call.node("Dropout", [x, ratio, sample], call.outputs)
            return None
        x = call.node("Dropout", [x, ratio, sample], suffix="sample")
    elif p.scale_train:  # a fork's field; BVLC always scales in training
        return [x]  # identity at inference: the top is the bottom's value
    call.node("Mul", [x, call.const("keep", keep)], call.outputs)
