"""Net: a directed acyclic graph of layers built from a NetParameter, as Caffe builds it.

Construction: upgrade legacy forms, keep the layers the NetState includes (phase, level,
stages), insert Split layers for blobs consumed more than once (both in :mod:`net_graph`), then
set up each layer in order, connecting blobs by name (in-place when a top reuses its bottom's
name), sharing named params and working out which layers and blobs need backward. A full TEST
forward on the GPU may replay a CUDA graph (:mod:`cuda_graphs`).
"""

import collections
import logging
import os

import numpy as np

from . import (cuda_graphs, net_fold, net_graph, net_int8, net_train_fuse, net_types, plugins,
               python_layers)
from .proto import protoio
from .blob import Blob
from .errors import CaffeError, LayerError, NetError, ShapeError, layer_failure
from .layers import create_layer
from .layer import TEST, TRAIN  # pycaffe's caffe.TRAIN / caffe.TEST
from .net_batches import BatchedCalls
from .net_graph import apply_fork_options, filter_net, infer_backward, insert_splits
from .proto import caffe_pb2

log = logging.getLogger("pycaffe_lite")


# ---- the Net -------------------------------------------------------------------------------
class LayerRecord:
    """One layer of a Net and its place in the graph (Caffe's parallel vectors): the blobs it
    reads and writes, their ids, which bottoms get a diff, backward or not, its param ids."""

    __slots__ = ("layer", "name", "bottoms", "bottom_ids", "bottom_need_backward", "tops",
                 "top_ids", "need_backward", "param_ids")

    def __init__(self, layer, name):
        self.layer, self.name, self.need_backward = layer, name, False
        self.bottoms, self.bottom_ids, self.bottom_need_backward = [], [], []
        self.tops, self.top_ids, self.param_ids = [], [], []


class Net(BatchedCalls):
    """A network built from a prototxt (or NetParameter), with pycaffe's constructor forms::

        Net(prototxt, phase)
        Net(prototxt, weights, phase)   # weights: a file, or a NetParameter (to_caffe's)
        Net(prototxt, phase, level=0, stages=(), weights=None)   # network_file=prototxt too

    A TEST net built with weights runs with BatchNorm, Scale and ReLU folded into the
    convolution or inner product before them (``fold=False`` or ``PYCAFFE_LITE_FOLD=0`` to
    turn it off; ``keep_intermediates=False`` also folds chains that are not in place, whose
    intermediate blobs then leave ``net.blobs``): see :mod:`net_fold`.

    ``allow_python_layers=False`` refuses a net with a ``Python`` layer before anything is
    imported (default: allowed, as in Caffe, unless ``PYCAFFE_LITE_ALLOW_PYTHON_LAYERS=0``).
    Intel Caffe's int8 convolutions run in int8 in TEST (``int8=False``: float; net_int8).
    """

    def __init__(self, model=None, *args, phase=None, level=0, stages=(), weights=None,
                 dtype=np.float32, fold=None, keep_intermediates=True,
                 allow_python_layers=None, int8=None, network_file=None):
        args, self._int8, model = list(args), int8, network_file if model is None else model
        if args and (isinstance(args[0], (str, bytes, caffe_pb2.NetParameter))
                     or hasattr(args[0], "__fspath__")):
            weights = args.pop(0)
        if args:
            phase = args.pop(0)
        if args:
            raise CaffeError("Net(model, [weights,] phase): unexpected extra arguments %r" % args)
        if model is None or phase is None:
            raise CaffeError("Net needs a net definition and a phase: Net(prototxt, TRAIN/TEST)")
        if phase not in (TRAIN, TEST):
            raise CaffeError("phase must be pycaffe_lite.TRAIN (0) or TEST (1), got %r" % (phase,))
        self.dtype = np.dtype(dtype)
        param = protoio.read_net_param(model)
        param.state.phase = phase
        param.state.level = level
        for s in stages or ():  # pycaffe's default is None
            param.state.stage.append(s)
        where = os.fspath(model) if isinstance(model, (str, os.PathLike)) and \
            os.path.exists(model) else None
        try:
            self._init(param, allow_python_layers, where)
        except CaffeError as exc:
            if where is None or not protoio.holds_weights(param, where):
                raise
            raise CaffeError("%s is a weights file (a binary NetParameter whose layers hold "
                             "blobs), not a net definition: give the net's prototxt as the "
                             "model and this file as the weights (building it as a net "
                             "failed: %s)" % (where, exc)) from exc
        if weights is not None:
            self.copy_from(weights, warn_unfilled=phase == TEST)
            if (phase == TEST and not self.int8_layers
                    and (net_fold.enabled_by_default() if fold is None else fold)):
                net_fold.fold(self, keep_intermediates)

    @classmethod
    def from_param(cls, net_param, dtype=np.float32, allow_python_layers=None):
        """A Net from a NetParameter whose ``state`` (phase, level, stages) is already set,
        as a solver builds its train and test nets."""
        net = cls.__new__(cls)
        net.dtype, net._int8 = np.dtype(dtype), None
        net._init(protoio.read_net_param(net_param), allow_python_layers)
        return net

    # -- construction ------------------------------------------------------------------------
    def _init(self, in_param, allow_python_layers=None, where=None):
        self.phase = in_param.state.phase
        param = apply_fork_options(insert_splits(filter_net(in_param), in_param))
        python_layers.refuse(param, allow_python_layers, where)
        net_types.check_types(param)
        types = self._types = (net_types.Types(param) if net_types.wants_float16(
            param, self.dtype) else None)  # float16 layers in GPU mode
        self.name = param.name
        self.param = param
        self.debug_info = param.debug_info
        self.records = []           # one LayerRecord per layer, in order
        self._fused = {}            # layer index -> its forward when folded (net_fold)
        self.folding = None
        self._hooks = {"before_forward": [], "after_forward": [], "before_backward": [],
                       "after_backward": []}
        self._blobs = []            # all blobs, by id
        self._blob_names = []
        self.blob_need_backward = []
        self._blob_loss_weights = []
        self._input_ids = []
        self.param_blobs = []       # every param blob, by id (owners and sharers)
        self.param_owners = []      # -1 for owners, else the owner's param id
        self.param_display_names = []
        self.param_layer_indices = []
        self.learnable_params = []  # unique learnable blobs
        self.learnable_param_ids = []
        self.params_lr = []
        self.has_params_lr = []
        self.params_weight_decay = []
        self.has_params_decay = []
        self._param_names_index = {}

        name_to_id = {}
        available = set()
        for layer_id, lp in enumerate(param.layer):
            if not lp.HasField("phase"):
                lp.phase = self.phase
            if lp.propagate_down and len(lp.propagate_down) != len(lp.bottom):
                raise NetError("layer '%s': propagate_down must be given once per bottom "
                               "(%d bottoms, %d values)"
                               % (lp.name, len(lp.bottom), len(lp.propagate_down)))
            layer = create_layer(lp, dtype=self.dtype)
            if types is not None:
                layer = types.create(lp, layer, lambda n: self._blobs[name_to_id[n]])
            rec = LayerRecord(layer, lp.name)
            self.records.append(rec)
            for j, bname in enumerate(lp.bottom):
                if bname not in available:
                    raise NetError("layer '%s' (type %s): unknown bottom blob '%s' (bottom index "
                                   "%d): no earlier layer produces it, or it was consumed "
                                   "in place" % (lp.name, lp.type, bname, j))
                bid = name_to_id[bname]
                rec.bottoms.append(self._blobs[bid] if types is None else
                                   types.bottom(layer_id, j, self._blobs[bid], layer.dtype))
                rec.bottom_ids.append(bid)
                nb = self.blob_need_backward[bid]
                rec.need_backward |= nb
                rec.bottom_need_backward.append(bool(lp.propagate_down[j]) if lp.propagate_down
                                                else nb)
                available.discard(bname)
            tops = list(lp.top)
            if layer.auto_top_blobs:
                while len(tops) < layer.needed_num_top_blobs():
                    tops.append(None)
            for j, tname in enumerate(tops):
                if tname is not None and j < len(lp.bottom) and tname == lp.bottom[j]:
                    tid = name_to_id[tname]  # in place
                elif tname is not None and tname in name_to_id:
                    raise NetError("layer '%s' (type %s): top blob '%s' is produced by more than "
                                   "one layer (only in-place reuse of the same-index bottom is "
                                   "allowed)" % (lp.name, lp.type, tname))
                else:
                    tid = len(self._blobs)
                    blob_name = tname if tname is not None else "(automatic)"
                    self._blobs.append(Blob((), layer.dtype))
                    self._blob_names.append(blob_name)
                    self.blob_need_backward.append(False)
                    self._blob_loss_weights.append(0.0)
                    if tname is not None:
                        name_to_id[tname] = tid
                if lp.type == "Input":
                    self._input_ids.append(tid)
                rec.tops.append(self._blobs[tid])
                rec.top_ids.append(tid)
                if tname is not None:
                    available.add(tname)
            net_graph.set_up_keeping_in_place_shapes(lp, rec, self._blobs, self._setup_layer)
            for j, tid in enumerate(rec.top_ids):
                self._blob_loss_weights[tid] = layer.loss(j)
            # params: read the layer's own param specs after setup (BatchNorm adds lr_mult 0)
            lp = layer.layer_param
            if len(lp.param) > len(layer.blobs):
                raise NetError("layer '%s' (type %s): %d param specs given but the layer has "
                               "only %d parameter blobs"
                               % (lp.name, lp.type, len(lp.param), len(layer.blobs)))
            default_spec = caffe_pb2.ParamSpec()
            for pid in range(len(layer.blobs)):
                spec = lp.param[pid] if pid < len(lp.param) else default_spec
                pneed = spec.lr_mult != 0 and layer.param_propagate_down[pid]
                rec.need_backward |= pneed
                layer.set_param_propagate_down(pid, pneed)
            for pid in range(len(layer.blobs)):
                self._append_param(param, layer_id, pid)
            if rec.need_backward:
                for tid in rec.top_ids:
                    self.blob_need_backward[tid] = True

        infer_backward(self, param)
        self.blobs = collections.OrderedDict(
            (n, self._blobs[i]) for i, n in enumerate(self._blob_names) if n != "(automatic)")
        # the blobs no layer consumes, in name order: Caffe keeps them in a std::set<string>
        self._output_ids = [name_to_id[n] for n in sorted(available)]
        net_int8.attach(self, self._int8)
        net_train_fuse.attach(self)
        if types is not None:
            types.attach(self)

    def _setup_layer(self, layer, bvec, tvec):
        _call_layer(layer, "setup", bvec, layer.SetUp, bvec, tvec)

    def _append_param(self, param, layer_id, pid):
        layer = self.records[layer_id].layer
        lp = layer.layer_param
        spec = lp.param[pid] if pid < len(lp.param) else None
        name = spec.name if spec is not None else ""
        net_pid = len(self.param_blobs)
        blob = layer.blobs[pid]
        self.param_blobs.append(blob)
        self.param_layer_indices.append((layer_id, pid))
        self.records[layer_id].param_ids.append(net_pid)
        self.param_display_names.append(name if name else str(pid))
        if not name or name not in self._param_names_index:
            if name:
                self._param_names_index[name] = net_pid
            self.param_owners.append(-1)
            self.learnable_param_ids.append(len(self.learnable_params))
            self.learnable_params.append(blob)
            self.has_params_lr.append(spec is not None and spec.HasField("lr_mult"))
            self.has_params_decay.append(spec is not None and spec.HasField("decay_mult"))
            self.params_lr.append(spec.lr_mult if spec is not None else 1.0)
            self.params_weight_decay.append(spec.decay_mult if spec is not None else 1.0)
            return
        owner_id = self._param_names_index[name]
        self.param_owners.append(owner_id)
        owner_layer_id, owner_pid = self.param_layer_indices[owner_id]
        owner_layer = self.records[owner_layer_id].layer
        owner = owner_layer.blobs[owner_pid]
        strict = spec.share_mode == caffe_pb2.ParamSpec.STRICT
        if (strict and owner.shape != blob.shape) or (not strict and owner.count != blob.count):
            raise ShapeError(
                "cannot share param '%s' owned by layer '%s' with layer '%s': shape mismatch "
                "(owner %s, sharer %s%s)" % (name, owner_layer.name, layer.name,
                                           owner.shape, blob.shape,
                                           "; share_mode STRICT needs equal shapes" if strict
                                           else ""))
        learnable_id = self.learnable_param_ids[owner_id]
        self.learnable_param_ids.append(learnable_id)
        if spec.HasField("lr_mult"):
            if self.has_params_lr[learnable_id]:
                if self.params_lr[learnable_id] != spec.lr_mult:
                    raise NetError("shared param '%s' has mismatched lr_mult (%g in layer '%s')"
                                   % (name, spec.lr_mult, layer.name))
            else:
                self.has_params_lr[learnable_id] = True
                self.params_lr[learnable_id] = spec.lr_mult
        if spec.HasField("decay_mult"):
            if self.has_params_decay[learnable_id]:
                if self.params_weight_decay[learnable_id] != spec.decay_mult:
                    raise NetError("shared param '%s' has mismatched decay_mult (%g in layer "
                                   "'%s')" % (name, spec.decay_mult, layer.name))
            else:
                self.has_params_decay[learnable_id] = True
                self.params_weight_decay[learnable_id] = spec.decay_mult
        blob.share_data(owner)
        blob.share_diff(owner)

    # -- pycaffe surface -------------------------------------------------------------------
    @property
    def layers(self):
        """The layers (pycaffe's); like ``_layer_names``, a tuple built from ``records``."""
        return tuple(rec.layer for rec in self.records)

    _layer_names = property(lambda self: tuple(rec.name for rec in self.records))
    layer_dict = property(lambda self: collections.OrderedDict(
        (rec.name, rec.layer) for rec in self.records))

    @property
    def params(self):
        """{layer name: list of param Blobs} for layers that have params (pycaffe's)."""
        return collections.OrderedDict(
            (rec.name, rec.layer.blobs) for rec in self.records if len(rec.layer.blobs))

    @property
    def blob_loss_weights(self):
        """{blob name: loss weight} (pycaffe's)."""
        return collections.OrderedDict(
            (n, self._blob_loss_weights[i]) for i, n in enumerate(self._blob_names)
            if n != "(automatic)")

    @property
    def inputs(self):
        return [self._blob_names[i] for i in self._input_ids]

    @property
    def outputs(self):
        return [self._blob_names[i] for i in self._output_ids]

    @property
    def blob_names(self):
        return list(self._blob_names)

    # pycaffe's index lists (BVLC's _caffe.cpp): blob indices into ``_blobs``/``_blob_names``
    _inputs = property(lambda self: list(self._input_ids))
    _outputs = property(lambda self: list(self._output_ids))

    def _top_ids(self, i):  # the blob indices of layer i's tops
        return list(self._layer_record(i).top_ids)

    def _bottom_ids(self, i):  # ... and of its bottoms
        return list(self._layer_record(i).bottom_ids)

    def _layer_record(self, i):
        if not isinstance(i, (int, np.integer)) or not 0 <= i < len(self.records):
            raise NetError("invalid layer id %r: net '%s' has layers 0 to %d"
                           % (i, self.name, len(self.records) - 1))
        return self.records[i]

    layer_names = property(lambda self: [rec.name for rec in self.records])

    @property
    def top_names(self):
        return collections.OrderedDict(
            (r.name, [self._blob_names[i] for i in r.top_ids]) for r in self.records)

    @property
    def bottom_names(self):
        return collections.OrderedDict(
            (r.name, [self._blob_names[i] for i in r.bottom_ids]) for r in self.records)

    def layer_index(self, name):
        try:
            return self._layer_names.index(name)
        except ValueError:
            raise NetError("unknown layer '%s' (layers: %s)"
                           % (name, ", ".join(self._layer_names))) from None

    # -- forward / backward ----------------------------------------------------------------
    def forward_from_to(self, start=0, end=None):
        end = len(self.records) - 1 if end is None else end
        self._check_range("forward", start, end, start, end)
        return cuda_graphs.forward(self, start, end, self._forward_layers)

    def _forward_layers(self, start, end):
        loss = 0.0
        hooks, fused = self._hooks, self._fused or net_train_fuse.forwards(self, start, end)
        for i in range(start, end + 1):
            rec = self.records[i]
            for hook in hooks["before_forward"]:
                hook(i)
            bottom = rec.bottoms
            loss += _call_layer(rec.layer, "forward", bottom, fused.get(i, rec.layer.Forward),
                                bottom, rec.tops)
            for hook in hooks["after_forward"]:
                hook(i)
        return loss

    def backward_from_to(self, start=None, end=0):
        start = len(self.records) - 1 if start is None else start
        self._check_range("backward", start, end, end, start)
        hooks, fused = self._hooks, net_train_fuse.backwards(self, start, end)
        for i in range(start, end - 1, -1):
            for hook in hooks["before_backward"]:
                hook(i)
            rec = self.records[i]
            if rec.need_backward:
                bottom = rec.bottoms
                _call_layer(rec.layer, "backward", bottom, fused.get(i, rec.layer.Backward),
                            rec.tops, rec.bottom_need_backward, bottom)
            for hook in hooks["after_backward"]:
                hook(i)

    def forward_prefilled(self):
        return self.forward_from_to()

    def forward_backward(self):
        loss = self.forward_from_to()
        self.backward_from_to()
        return loss

    def forward(self, blobs=None, start=None, end=None, **kwargs):
        """Run forward (pycaffe's signature); returns {output blob name: data array}."""
        start_ind = self.layer_index(start) if start is not None else 0
        end_ind = self.layer_index(end) if end is not None else len(self.records) - 1
        self._check_blob_names(blobs, "forward(blobs=...)")
        outputs = dict.fromkeys(  # pycaffe's set, in order: the outputs, then the blobs asked
            list(self.outputs if end is None else self.top_names[end]) + list(blobs or ()))
        for name, value in kwargs.items():
            if name not in self.blobs:
                raise NetError("forward(): '%s' is not a blob of this net (inputs: %s)"
                               % (name, ", ".join(self.inputs)))
            if start is None and name not in self.inputs:
                raise NetError("forward(): '%s' is not an input of this net (inputs: %s)"
                               % (name, ", ".join(self.inputs)))
            self._set_blob(name, value)
        if self.folding is not None and self.folding.cuts(start_ind, end_ind):
            with net_fold.unfused(self):
                self.forward_from_to(start_ind, end_ind)
        else:
            self.forward_from_to(start_ind, end_ind)
        return {name: self.blobs[name].data for name in outputs}

    def backward(self, diffs=None, start=None, end=None, **kwargs):
        """Run backward (pycaffe's signature); returns {input blob name: diff array}."""
        start_ind = self.layer_index(start) if start is not None else len(self.records) - 1
        end_ind = self.layer_index(end) if end is not None else 0
        self._check_blob_names(diffs, "backward(diffs=...)")
        outputs = dict.fromkeys(list(self.inputs if end is None else self.bottom_names[end])
                                + list(diffs or ()))
        for name, value in kwargs.items():
            if name not in self.blobs:
                raise NetError("backward(): '%s' is not a blob of this net" % name)
            blob = self.blobs[name]
            try:
                value = np.asarray(value, dtype=self.dtype)
            except (ValueError, TypeError) as exc:
                raise NetError("backward(): cannot use a %s as the diff of blob '%s' (%s)"
                               % (type(value).__name__, name, exc)) from None
            if value.shape != blob.shape:
                raise ShapeError("backward(): diff for blob '%s' has shape %s, the blob has %s"
                                 % (name, value.shape, blob.shape))
            blob.diff[...] = value
        self.backward_from_to(start_ind, end_ind)
        return {name: self.blobs[name].diff for name in outputs}

    def _check_blob_names(self, names, what):
        unknown = [n for n in names or () if n not in self.blobs]
        if unknown:
            raise NetError("%s: %s not a blob of this net (blobs: %s)"
                           % (what, ", ".join("'%s'" % n for n in unknown)
                              + (" is" if len(unknown) == 1 else " are"),
                              ", ".join(self.blobs)))

    def before_forward(self, fn):
        self._hooks["before_forward"].append(fn)

    def after_forward(self, fn):
        self._hooks["after_forward"].append(fn)

    def before_backward(self, fn):
        self._hooks["before_backward"].append(fn)

    def after_backward(self, fn):
        self._hooks["after_backward"].append(fn)

    def _set_blob(self, name, value):
        blob = self.blobs[name]
        try:
            value = np.asarray(value, dtype=self.dtype)
        except (ValueError, TypeError) as exc:
            raise NetError("input '%s': cannot use a %s as blob data (%s); pass a numeric array "
                           "of shape %s" % (name, type(value).__name__, exc, blob.shape)) \
                from None
        if value.shape != blob.shape:  # another batch or image size: the net is reshaped
            raise ShapeError("input '%s' has shape %s, the net expects %s (reshape the blob "
                             "and call net.reshape() first)" % (name, value.shape, blob.shape))
        blob.data[...] = value

    def reshape(self):
        for i, rec in enumerate(self.records):
            if self._types is not None:  # converted bottoms take their producers' shapes
                self._types.reshape_copies(i)
            layer, bottom = rec.layer, rec.bottoms
            _call_layer(layer, "reshape", bottom, layer.reshape, bottom, rec.tops)

    def clear_param_diffs(self):
        for blob in self.learnable_params:
            blob.write_diff()[...] = 0

    def update(self):
        for blob in self.learnable_params:
            blob.update()

    def share_with(self, other):
        """Use ``other``'s trained params, matched by layer name (ShareTrainedLayersWith)."""
        net_fold.unfold(self)  # the shared blobs change under a folded copy
        mine = self.layer_dict
        for rec in other.records:
            name, layer = rec.name, rec.layer
            target = mine.get(name)
            if target is None or not layer.blobs:
                continue
            if len(target.blobs) != len(layer.blobs):
                raise NetError("layer '%s': cannot share %d param blobs with %d"
                               % (name, len(layer.blobs), len(target.blobs)))
            for j, (src, dst) in enumerate(zip(layer.blobs, target.blobs)):
                if src.shape != dst.shape:
                    raise ShapeError("cannot share param %d of layer '%s': shape %s vs %s"
                                     % (j, name, src.shape, dst.shape))
                dst.share_data(src)

    # -- weights in and out ----------------------------------------------------------------
    def copy_from(self, path, warn_unfilled=False):
        """Load trained weights from a ``.caffemodel`` (binary NetParameter), Caffe HDF5 or a
        NetParameter in memory."""
        from . import weights  # warn_unfilled: see weights.copy_trained_layers
        with net_fold.refolding(self), net_types.weights_context(self):
            weights.copy_trained_layers(self, path, warn_unfilled)

    def to_proto(self, write_diff=False):
        param = caffe_pb2.NetParameter()
        param.name = self.name
        with net_types.weights_context(self):  # float16 params: their float32 masters
            for rec in self.records:
                rec.layer.to_proto(write_diff, param.layer.add())
        return param

    def save(self, path, write_diff=False):
        """Write the weights as a binary ``.caffemodel`` (or HDF5 when the name ends in .h5)."""
        if str(path).endswith((".h5", ".hdf5")):
            self.save_hdf5(path, write_diff)
        else:
            protoio.write_binary(self.to_proto(write_diff), path)

    def save_hdf5(self, path, write_diff=False):
        from . import weights
        with net_types.weights_context(self):
            weights.save_hdf5(self, path, write_diff)

    def load_hdf5(self, path):
        from . import weights
        with net_fold.refolding(self), net_types.weights_context(self):
            weights.copy_trained_layers_hdf5(self, path)

    def fold(self, keep_intermediates=True):
        """Fold BatchNorm/Scale/ReLU into the layers before them, from the current weights
        (a TEST net; see :mod:`pycaffe_lite.net_fold`)."""
        return net_fold.fold(self, keep_intermediates)

    def unfold(self):
        """Run every layer on its own again, with writable params and every blob listed."""
        net_fold.unfold(self)

    # -- lifetime ---------------------------------------------------------------------------
    def close(self):
        """Stop every layer's loading threads, then close the files and databases they read
        (:mod:`pycaffe_lite.lifecycle`); the data layers cannot run afterwards. Closing twice
        does nothing. A net that is dropped, or still open at exit, is released the same way.
        Also ``with Net(...) as net:``."""
        errors = []
        for rec in self.records:
            close = getattr(rec.layer, "close", None)
            if close is not None:
                try:
                    close()
                except CaffeError as exc:
                    errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "<Net '%s': %d layers, %d blobs>" % (self.name, len(self.records), len(self.blobs))


# What a layer raises on inputs it cannot handle (a NumPy shape error, a math domain error, an
# allocation that does not fit), and anything a layer class of one's own raises (a Python
# layer, a plugin's): a LayerError naming the layer, step and bottom shapes (cause kept).
LAYER_FAILURES = (ValueError, IndexError, TypeError, KeyError, ArithmeticError, MemoryError,
                  np.linalg.LinAlgError)


def _call_layer(layer, step, bottom, fn, *args):
    try:
        return fn(*args)
    except LayerError:
        raise
    except CaffeError as exc:
        raise LayerError(str(exc), layer.name, layer.type) from None
    except Exception as exc:
        own = type(layer).__module__.startswith(__package__ + ".")
        if own and not isinstance(exc, LAYER_FAILURES):
            raise
        raise layer_failure(exc, "%s failed with bottom shapes [%s]: %s: %s%s" % (
            step, ", ".join(str(b.shape) for b in bottom), type(exc).__name__, exc,
            "" if own else plugins.raised_in(exc, layer)), layer.name, layer.type) from exc
