"""NetParameter transforms applied before a Net is built, as Caffe applies them.

- :func:`filter_net`: keep the layers whose include/exclude rules the NetState meets
  (phase, level, stages);
- :func:`insert_splits`: give every top that several layers consume (a use as a loss counts)
  a Split layer, with Caffe's layer and blob names;
- :func:`infer_backward`: which layers of a built Net need backward, as Caffe prunes it;
- :func:`set_up_keeping_in_place_shapes`: a layer in place on a blob must keep its shape (its
  reshape of the top would reshape its own bottom);
- :func:`apply_fork_options`: the forks' layer-wide options (Intel Caffe's ``engine`` string,
  NVCaffe's storage and math types) said in this schema's terms.
"""

import collections
import logging

from google.protobuf import text_format

from . import backend
from .errors import NetError
from .proto import caffe_pb2

log = logging.getLogger(__name__)


# ---- NetState filtering ------------------------------------------------------------------
def state_meets_rule(state, rule):
    if rule.HasField("phase") and rule.phase != state.phase:
        return False
    if rule.HasField("min_level") and state.level < rule.min_level:
        return False
    if rule.HasField("max_level") and state.level > rule.max_level:
        return False
    stages = set(state.stage)
    if any(s not in stages for s in rule.stage):
        return False
    if any(s in stages for s in rule.not_stage):
        return False
    return True


def filter_net(param):
    """A copy of ``param`` holding only the layers its state includes."""
    out = caffe_pb2.NetParameter()
    out.CopyFrom(param)
    del out.layer[:]
    for layer in param.layer:
        if _included(layer, param.state):
            out.layer.add().CopyFrom(layer)
    return out


def _included(layer, state):
    if layer.include and layer.exclude:
        raise NetError("layer '%s': specify either include rules or exclude rules, not both"
                       % layer.name)
    included = not layer.include
    if any(state_meets_rule(state, r) for r in layer.exclude):
        included = False
    if any(state_meets_rule(state, r) for r in layer.include):
        included = True
    return included


# ---- Split insertion ---------------------------------------------------------------------
# Caffe's names (insert_splits.cpp): the blob's name, then its producer's, e.g. LeNet's
# "label_mnist_1_split" layer and its tops "label_mnist_1_split_0", "..._1"
def split_layer_name(layer_name, blob_name, blob_idx):
    return "%s_%s_%d_split" % (blob_name, layer_name, blob_idx)


def split_blob_name(layer_name, blob_name, blob_idx, split_idx):
    return "%s_%s_%d_split_%d" % (blob_name, layer_name, blob_idx, split_idx)


def _rules_text(layer):
    rules = [("include", r) for r in layer.include] + [("exclude", r) for r in layer.exclude]
    return " ".join("%s { %s }" % (kind, text_format.MessageToString(r, as_one_line=True))
                    for kind, r in rules)


def _state_text(state):
    stages = ", ".join('"%s"' % s for s in state.stage)
    return "phase %s, level %d, %s" % (caffe_pb2.Phase.Name(state.phase), state.level,
                                        "stages %s" % stages if stages else "no stage")


def _left_out_producers(source, blob):
    """The layers of the unfiltered ``source`` writing ``blob`` that its state leaves out, as
    an explanation to add to an unknown-bottom error ('' when there are none)."""
    if source is None:
        return ""
    left = ["'%s' (%s)" % (layer.name, _rules_text(layer)) for layer in source.layer
            if blob in layer.top and not _included(layer, source.state)]
    if not left:
        return ""
    return ("; the layers that write it, %s, are left out by the net state (%s): give the "
            "phase and stages they need (Net(..., phase, stages=[...]), --stage)"
            % (", ".join(left), _state_text(source.state)))


def insert_splits(param, source=None):
    """Caffe's InsertSplits: a Split layer after every top consumed more than once
    (a use as a loss counts as a consumer). ``source``: the NetParameter before
    :func:`filter_net`, to name in an unknown-bottom error the layers that write the blob but
    that the net state leaves out."""
    last_top = {}
    bottom_source = {}
    consumers = collections.Counter()
    loss_weight = {}
    for i, layer in enumerate(param.layer):
        for j, name in enumerate(layer.bottom):
            if name not in last_top:
                raise NetError("unknown bottom blob '%s' (layer '%s', bottom index %d): no "
                               "earlier layer produces it%s" % (name, layer.name, j,
                                                                _left_out_producers(source, name)))
            bottom_source[(i, j)] = last_top[name]
            consumers[last_top[name]] += 1
        for j, name in enumerate(layer.top):
            last_top[name] = (i, j)
        for j in range(min(len(layer.loss_weight), len(layer.top))):
            src = last_top[layer.top[j]]
            loss_weight[src] = layer.loss_weight[j]
            if loss_weight[src]:
                consumers[src] += 1

    out = caffe_pb2.NetParameter()
    out.CopyFrom(param)
    del out.layer[:]
    next_split = collections.Counter()
    for i, layer in enumerate(param.layer):
        new = out.layer.add()
        new.CopyFrom(layer)
        for j in range(len(new.bottom)):
            src = bottom_source[(i, j)]
            if consumers[src] > 1:
                new.bottom[j] = split_blob_name(param.layer[src[0]].name, new.bottom[j], src[1],
                                                next_split[src])
                next_split[src] += 1
        for j, name in enumerate(layer.top):
            n = consumers[(i, j)]
            if n <= 1:
                continue
            w = loss_weight.get((i, j), 0.0)
            split = out.layer.add()
            split.name = split_layer_name(layer.name, name, j)
            split.type = "Split"
            split.bottom.append(name)
            for k in range(n):
                split.top.append(split_blob_name(layer.name, name, j, k))
                if w:
                    split.loss_weight.append(w if k == 0 else 0.0)
            if w:
                del new.loss_weight[:]
                next_split[(i, j)] += 1
    return out


# ---- the forks' layer-wide options ----------------------------------------------------------
# Layer type -> its parameter message with an Engine enum (BVLC's CAFFE = 1, CUDNN = 2)
_ENGINE_PARAMS = {"Convolution": "convolution_param", "Deconvolution": "convolution_param",
                  "Pooling": "pooling_param", "ReLU": "relu_param", "Sigmoid": "sigmoid_param",
                  "TanH": "tanh_param", "Softmax": "softmax_param",
                  "SoftmaxWithLoss": "softmax_param", "LRN": "lrn_param", "SPP": "spp_param"}
_TYPE_FIELDS = ("forward_type", "backward_type", "forward_math", "backward_math")
_NET_TYPE_FIELDS = tuple("default_" + f for f in _TYPE_FIELDS)


def apply_fork_options(param):
    """Intel Caffe's ``engine: "CAFFE"`` or ``"CUDNN"`` (optionally ``":devices"``; a layer
    without one takes the net's) becomes
    the engine of the layer's own parameters where those leave it unset; the MKL engines run
    as DEFAULT. NVCaffe's storage and math types other than FLOAT run in the net's own type
    in CPU mode (a note says so once per net); in GPU mode FLOAT16 layers of a float32 net run
    in float16 (:mod:`pycaffe_lite.net_types`). Intel Caffe's net-wide
    ``bn_stats_batch_size`` becomes every BatchNorm layer's ``stats_batch_size``, as the fork
    sets it. ``param`` is changed in place."""
    for layer in param.layer:
        if param.HasField("bn_stats_batch_size") and layer.type == "BatchNorm":
            layer.batch_norm_param.stats_batch_size = param.bn_stats_batch_size
        if not layer.engine and param.engine:  # Intel's net-wide engine
            layer.engine = param.engine
        if not layer.engine:
            continue
        name = layer.engine.split(":", 1)[0].strip().upper()
        field = _ENGINE_PARAMS.get(layer.type)
        if name in ("CAFFE", "CUDNN") and field is not None:
            sub = getattr(layer, field)
            if not sub.HasField("engine"):
                sub.engine = sub.Engine.Value(name)
    asked = {caffe_pb2.Type.Name(getattr(param, f)) for f in _NET_TYPE_FIELDS
             if param.HasField(f)}
    for layer in param.layer:
        asked |= {caffe_pb2.Type.Name(getattr(layer, f)) for f in _TYPE_FIELDS
                  if layer.HasField(f)}
    asked -= {"FLOAT"}
    if backend.mode() == "gpu":
        asked -= {"FLOAT16"}  # net_types decides, and says, where they run in float16
    if asked:
        log.info("Net %s: NVCaffe storage/math types %s run as this net's float type "
                 "(float32 unless built in float64)%s", param.name or "(unnamed)",
                 ", ".join(sorted(asked)),
                 "" if backend.mode() == "gpu" else " in CPU mode (GPU mode: FLOAT16 in float16)")
    return param


# ---- backward pruning ----------------------------------------------------------------------
def infer_backward(net, param):
    """Caffe's backward pruning: which layers and bottoms of ``net`` need a gradient (only
    those under a loss), and ``force_backward``'s overrides."""
    under_loss, skip_backprop = set(), set()
    for rec in reversed(net.records):
        layer = rec.layer
        contributes = False
        skip = True
        for j, tid in enumerate(rec.top_ids):
            name = net._blob_names[tid]
            if layer.loss(j) or name in under_loss:
                contributes = True
            if name not in skip_backprop:
                skip = False
            if contributes and not skip:
                break
        if rec.need_backward and skip:
            rec.need_backward = False
            rec.bottom_need_backward = [False] * len(rec.bottom_ids)
        if not contributes:
            rec.need_backward = False
        for j, bid in enumerate(rec.bottom_ids):
            name = net._blob_names[bid]
            if contributes:
                under_loss.add(name)
            else:
                rec.bottom_need_backward[j] = False
            if not rec.bottom_need_backward[j]:
                skip_backprop.add(name)
    if param.force_backward:
        for rec in net.records:
            layer = rec.layer
            rec.need_backward = True
            for j, bid in enumerate(rec.bottom_ids):
                nb = rec.bottom_need_backward[j] or layer.allow_force_backward(j)
                rec.bottom_need_backward[j] = nb
                net.blob_need_backward[bid] = net.blob_need_backward[bid] or nb
            for pid in range(len(layer.blobs)):
                layer.set_param_propagate_down(pid, True)


# ---- in-place layers -----------------------------------------------------------------------
def set_up_keeping_in_place_shapes(lp, rec, blobs, setup):
    """``setup(layer, bottoms, tops)`` for a layer record, then refuse the layer if it runs in
    place on a blob (top j is bottom j) whose shape the setup changed; a Python layer may
    reshape in place on purpose."""
    before = {j: blobs[tid].shape for j, tid in enumerate(rec.top_ids)
              if j < len(rec.bottom_ids) and rec.bottom_ids[j] == tid}
    setup(rec.layer, rec.bottoms, rec.tops)
    if lp.type == "Python":
        return
    for j, shape in before.items():
        after = blobs[rec.top_ids[j]].shape
        if after != shape:
            raise NetError("layer '%s' (type %s) cannot run in place on blob '%s': its top has "
                           "shape %s, its bottom %s; give the top a name of its own"
                           % (lp.name, lp.type, lp.top[j], after, shape))
