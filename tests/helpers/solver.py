"""Shared pieces of the solver tests: a tiny linear net, its data, and hand-computed gradients.

The net: inputs x (N x D) and y (N x K) from an Input layer, z = x W^T + b (InnerProduct), and
the EuclideanLoss sum((z - y)^2) / (2 N). Its gradients, computed here in float64 NumPy
independently of the framework: dz = (z - y) / N, dW = dz^T x, db = sum_n dz.
"""

import numpy as np
from google.protobuf import text_format

from pycaffe_lite.proto import caffe_pb2

N, D, K = 4, 3, 2

TINY_NET = """
name: "tiny"
layer { name: "input" type: "Input" top: "x" top: "y"
        input_param { shape { dim: %(N)d dim: %(D)d } shape { dim: %(N)d dim: %(K)d } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        param { lr_mult: %(lr_w)s decay_mult: %(decay_w)s }
        param { lr_mult: %(lr_b)s decay_mult: %(decay_b)s }
        inner_product_param { num_output: %(K)d
          weight_filler { type: "gaussian" std: 0.5 }
          bias_filler { type: "constant" value: 0.1 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "z" bottom: "y" top: "loss" }
"""


def tiny_net_text(lr_w=1, lr_b=2, decay_w=1, decay_b=0):
    return TINY_NET % dict(N=N, D=D, K=K, lr_w=lr_w, lr_b=lr_b, decay_w=decay_w,
                           decay_b=decay_b)


def solver_param(text, net_text=None):
    """A SolverParameter from ``text`` with the tiny net inline as ``net_param``."""
    param = caffe_pb2.SolverParameter()
    text_format.Merge(text, param)
    if not (param.HasField("net") or param.HasField("train_net") or
            param.HasField("train_net_param")):
        text_format.Merge(net_text or tiny_net_text(), param.net_param)
    if not param.HasField("snapshot_after_train"):
        param.snapshot_after_train = False
    return param


def batches(count, seed=0):
    """``count`` (x, y) float32 batches."""
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(N, D)).astype(np.float32),
             rng.normal(size=(N, K)).astype(np.float32)) for _ in range(count)]


def feed(net, data):
    """Before every forward pass, load the next batch of ``data`` into x and y (cycling)."""
    state = {"i": 0}

    def hook(layer_index):
        if layer_index != 0:
            return
        x, y = data[state["i"] % len(data)]
        net.blobs["x"].data[...] = x
        net.blobs["y"].data[...] = y
        state["i"] += 1

    net.before_forward(hook)
    return state


def grads(W, b, x, y):
    """(loss, dW, db) of the tiny net in float64."""
    W, b, x, y = (np.asarray(a, np.float64) for a in (W, b, x, y))
    z = x @ W.T + b
    loss = ((z - y) ** 2).sum() / (2 * len(x))
    dz = (z - y) / len(x)
    return loss, dz.T @ x, dz.sum(0)


def params_of(solver):
    W, b = solver.net.params["ip"]
    return W.data.astype(np.float64), b.data.astype(np.float64)
