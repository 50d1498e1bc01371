"""Parameter initialisation, with Caffe's formulas (``filler { type: ... }``)."""

import math

import numpy as np

from . import backend
from .errors import CaffeError
from .proto import caffe_pb2
from .registry import FILLERS

VarianceNorm = caffe_pb2.FillerParameter


def _no_sparse(param, name):
    if param.sparse != -1:
        raise CaffeError("filler '%s' does not support sparse (got sparse: %d); only "
                         "'gaussian' does" % (name, param.sparse))


def _fans(blob):
    if blob.num_axes < 1:
        raise CaffeError("filler needs a blob with at least one axis, got shape %s"
                         % (blob.shape,))
    count = blob.count
    fan_in = count // blob.shape[0] if blob.shape[0] else 0
    fan_out = count // blob.shape[1] if blob.num_axes > 1 and blob.shape[1] else count
    return fan_in, fan_out


def _scale_n(param, blob):
    fan_in, fan_out = _fans(blob)
    if param.variance_norm == VarianceNorm.AVERAGE:
        return (fan_in + fan_out) / 2.0
    if param.variance_norm == VarianceNorm.FAN_OUT:
        return float(fan_out)
    return float(fan_in)


def _write(blob, values):
    blob.data[...] = values.astype(blob.dtype, copy=False)


@FILLERS.register("constant")
def fill_constant(blob, param, rng):
    _no_sparse(param, "constant")
    blob.data[...] = param.value


@FILLERS.register("uniform")
def fill_uniform(blob, param, rng):
    _no_sparse(param, "uniform")
    if param.min > param.max:  # as Caffe's CHECK_LE(a, b)
        raise CaffeError("uniform filler: min (%g) must not be greater than max (%g)"
                         % (param.min, param.max))
    _write(blob, rng.uniform(param.min, param.max, blob.shape))


@FILLERS.register("gaussian")
def fill_gaussian(blob, param, rng):
    if param.sparse < -1:  # as Caffe's CHECK_GE(sparse, -1)
        raise CaffeError("gaussian filler: sparse must be -1 (dense) or a number of non-zero "
                         "inputs per output >= 0, got %d" % param.sparse)
    values = rng.normal(param.mean, param.std, blob.shape)
    if param.sparse >= 0:
        if blob.num_axes < 1:
            raise CaffeError("sparse gaussian filler needs a blob with at least one axis")
        # Each output (first axis) keeps on average `sparse` non-zero inputs.
        p = param.sparse / float(blob.shape[0])
        values *= rng.random(blob.shape) < p
    _write(blob, values)


@FILLERS.register("positive_unitball")
def fill_positive_unitball(blob, param, rng):
    _no_sparse(param, "positive_unitball")
    values = rng.uniform(0.0, 1.0, blob.shape).reshape(blob.shape[0] if blob.num_axes else 1, -1)
    values /= values.sum(axis=1, keepdims=True)
    _write(blob, values.reshape(blob.shape))


@FILLERS.register("xavier")
def fill_xavier(blob, param, rng):
    _no_sparse(param, "xavier")
    scale = math.sqrt(3.0 / _scale_n(param, blob))
    _write(blob, rng.uniform(-scale, scale, blob.shape))


@FILLERS.register("msra")
def fill_msra(blob, param, rng):
    _no_sparse(param, "msra")
    std = math.sqrt(2.0 / _scale_n(param, blob))
    _write(blob, rng.normal(0.0, std, blob.shape))


@FILLERS.register("bilinear")
def fill_bilinear(blob, param, rng):
    """Weights of a bilinear upsampling kernel, for Deconvolution layers: for a K x K kernel,
    ``f = ceil(K / 2)``, ``c = (K - 1) / (2 f)`` and ``w(x) = 1 - |x / f - c|`` (symmetric for
    any K, as Caffe's filler since 2017)."""
    _no_sparse(param, "bilinear")
    if blob.num_axes != 4 or blob.shape[2] != blob.shape[3]:
        raise CaffeError("bilinear filler needs a 4-axis blob with square kernels, got shape %s"
                         % (blob.shape,))
    k = blob.shape[3]
    f = math.ceil(k / 2.0)
    c = (k - 1) / (2.0 * f)
    x = np.arange(k)
    w = 1 - np.abs(x / f - c)
    blob.data[...] = np.outer(w, w).astype(blob.dtype)


def fill(blob, filler_param=None, rng=None):
    """Fill ``blob``'s data as ``filler_param`` (a FillerParameter) says."""
    param = filler_param if filler_param is not None else caffe_pb2.FillerParameter()
    fn = FILLERS.get(param.type, "filler of a blob of shape %s" % (blob.shape,))
    if blob.count == 0 and param.type != "uniform":  # nothing to fill (nor fans to scale by)
        return blob
    fn(blob, param, rng if rng is not None else backend.rng())
    return blob
