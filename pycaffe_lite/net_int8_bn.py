"""Intel Caffe's BatchNorm (+ Scale) fold in its int8 nets (``RemoveBNScale``,
``src/caffe/util/remove_batch_norm.cpp``, the first rule of its net compiler; docs/int8.md).

In a TEST net, a Convolution whose first reader is a BatchNorm (``use_global_stats`` not set
to false) takes that BatchNorm into its weights and bias, and the Scale with it when the
Scale is the first reader of the BatchNorm's top (any other reader: the BatchNorm folds alone,
as a Scale of 1 and 0). With ``sf = 1 / s`` for the BatchNorm's scale factor ``s`` (1 when
``s`` is 0), in float32::

    a  = gamma / sqrt(var * sf + eps)
    b' = b * a + (beta - mean * sf * a)        (b = 0 for a convolution without bias)
    w' = w * a                                 per output channel

The convolution keeps its ``quantization_param``: the int8 engine quantizes ``w'`` and ``b'``,
and the folded convolution writes the last folded layer's top. The compiler's later rules (the
ReLU and sum fusions) see the convolution followed by what reads that top. Here the fold is
computed from the layers' current blobs at each forward (Intel folds the weights file's blobs
as it loads them), so the net's params keep their values.
"""

import numpy as np

from .errors import NetError
from .proto import caffe_pb2

f32 = np.float32


class BNFold:
    """The BatchNorm (record index ``bn``) and Scale (``scale``, or None) folded into
    convolution record ``conv``; ``out`` is the blob the folded convolution writes and
    ``last`` the record that wrote it in the net as written."""

    def __init__(self, conv, bn, scale, out):
        self.conv, self.bn, self.scale, self.out = conv, bn, scale, out
        self.last = scale if scale is not None else bn

    @property
    def dropped(self):
        return (self.bn,) if self.scale is None else (self.bn, self.scale)

    def weights(self, net):
        """The folded float32 weights and bias of the convolution, from the current blobs."""
        conv = net.records[self.conv].layer
        bn = net.records[self.bn].layer
        w = np.asarray(conv.blobs[0].cpu_data(), f32)
        n = w.shape[0]
        b = np.asarray(conv.blobs[1].cpu_data(), f32).reshape(-1) if conv.bias_term \
            else np.zeros(n, f32)
        mean, var, factor = (np.asarray(bn.blobs[k].cpu_data(), f32).reshape(-1)
                             for k in range(3))
        if self.scale is not None:
            sc = net.records[self.scale].layer
            gamma, beta = (np.asarray(sc.blobs[k].cpu_data(), f32).reshape(-1)
                           for k in range(2))
        elif len(bn.blobs) >= 4:  # a BatchNorm holding its own scale (and bias)
            gamma = np.asarray(bn.blobs[3].cpu_data(), f32).reshape(-1)
            beta = np.asarray(bn.blobs[4].cpu_data(), f32).reshape(-1) \
                if len(bn.blobs) >= 5 else np.zeros(n, f32)
        else:
            gamma, beta = np.ones(n, f32), np.zeros(n, f32)
        sf = f32(1) if factor[0] == 0 else f32(1) / factor[0]
        eps = f32(bn.layer_param.batch_norm_param.eps)
        a = gamma / np.sqrt(var * sf + eps)
        bias = b * a + (beta - (mean * sf) * a)
        return w * a.reshape((-1,) + (1,) * (w.ndim - 1)), bias


def _first_reader(net, blob, start, skip=()):
    for j in range(start, len(net.records)):
        if j not in skip and blob in net.records[j].bottom_ids:
            return j
    return None


def _check(net, fold):
    """Refuse what Intel Caffe's fold reads out of bounds: a Scale without its bias blob, or
    blobs not of one value per output channel."""
    conv = net.records[fold.conv]
    n = conv.layer.blobs[0].shape[0]
    if fold.scale is not None:
        sc = net.records[fold.scale]
        if len(sc.layer.blobs) != 2 or any(b.count != n for b in sc.layer.blobs):
            raise NetError(
                "layer '%s' (type Scale): Intel Caffe's int8 net compiler folds it, with "
                "BatchNorm '%s', into convolution '%s' and reads its scale and bias blobs, "
                "%d values each; it has %d blob(s) of %s values (a Scale with bias_term and "
                "one bottom is needed; or run the net with int8 off)"
                % (sc.name, net.records[fold.bn].name, conv.name, n, len(sc.layer.blobs),
                   "/".join(str(b.count) for b in sc.layer.blobs) or "no"))
    bn = net.records[fold.bn]
    if bn.layer.blobs[0].count != n:
        raise NetError("layer '%s' (type BatchNorm): Intel Caffe's int8 net compiler folds "
                       "it into convolution '%s' of %d outputs; it has %d channels"
                       % (bn.name, conv.name, n, bn.layer.blobs[0].count))


def folds(net):
    """{convolution record index: BNFold} for the folds Intel Caffe's compiler makes in
    ``net`` (a TEST net; none in TRAIN)."""
    if net.phase != caffe_pb2.TEST:
        return {}
    recs, out, dropped = net.records, {}, set()
    for i, rec in enumerate(recs):
        if rec.layer.layer_param.type != "Convolution" or not rec.top_ids or i in dropped:
            continue
        j = _first_reader(net, rec.top_ids[0], i + 1)
        if j is None or recs[j].layer.layer_param.type != "BatchNorm" or not recs[j].top_ids:
            continue
        bp = recs[j].layer.layer_param.batch_norm_param
        if bp.HasField("use_global_stats") and not bp.use_global_stats:
            continue  # kept_bn_layers: the BatchNorm stays, and the convolution as it is
        # sought from the layer two after the convolution, as the compiler does: an in-place
        # BatchNorm further on finds itself there, and nothing is folded
        k = _first_reader(net, recs[j].top_ids[0], i + 2)
        if k is None or k == j:
            continue
        if recs[k].layer.layer_param.type == "Scale" and recs[k].top_ids:
            fold = BNFold(i, j, k, recs[k].top_ids[0])
        else:
            fold = BNFold(i, j, None, recs[j].top_ids[0])
        _check(net, fold)
        out[i] = fold
        dropped.update(fold.dropped)
    return out


def dropped(fold_map):
    """The record indices of the layers the folds remove from the compiled net."""
    return {k for f in fold_map.values() for k in f.dropped}


def out_blob(net, fold_map, i):
    """The blob convolution record ``i`` writes in the compiled net."""
    f = fold_map.get(i)
    return f.out if f is not None else net.records[i].top_ids[0]


def reader_start(fold_map, i):
    """The record after which the compiled net's readers of convolution ``i`` are sought."""
    f = fold_map.get(i)
    return (f.last if f is not None else i) + 1
