"""Trained weights in and out of a Net: ``.caffemodel`` (binary NetParameter) and Caffe's HDF5
layout (``/data/<layer>/<i>`` and, optionally, ``/diff/<layer>/<i>``). Reading and writing the
files themselves is :mod:`pycaffe_lite.proto.weights_file`'s."""

import logging
import os

import numpy as np

from .blob import proto_shape
from .errors import ProtoError, ShapeError
from .proto import caffe_pb2, upgrade, weights_file
from .proto.weights_file import is_hdf5, write_hdf5

log = logging.getLogger("pycaffe_lite")


def copy_trained_layers(net, path, warn_unfilled=False):
    """Copy a ``.caffemodel``'s or HDF5 file's weights, or a NetParameter's (read as a
    ``.caffemodel``: ``to_caffe``'s weights, kept in memory), into ``net`` by layer name. With
    ``warn_unfilled`` (a net built with its weights to run them, where a layer the file has
    nothing for is a wrong name rather than fine-tuning), a warning names the layers whose
    parameters keep their fillers' values."""
    if isinstance(path, caffe_pb2.NetParameter):
        source, path = path, "<NetParameter>"
        if len(source.layers):  # legacy layers: upgraded as a .caffemodel's, on a copy
            source = caffe_pb2.NetParameter.FromString(source.SerializeToString())
        upgrade.upgrade_net_as_needed(source, path, weights=True)
        filled = copy_trained_layers_from_param(net, source, path)
    else:
        path = os.fspath(path)
        if not os.path.exists(path):
            raise ProtoError("weights file not found", path)
        if is_hdf5(path):
            filled = copy_trained_layers_hdf5(net, path)
        else:
            filled = copy_trained_layers_from_param(net, weights_file.read_caffemodel(path),
                                                    path)
    if warn_unfilled and filled:
        _warn_unfilled(net, filled, path)


def _warn_unfilled(net, filled, path):
    """Warn about the layers with parameters of their own (not shared with a layer that was
    filled) to which the file gave nothing: Caffe keeps their filler values silently."""
    names = net.layer_names
    ids = {i: (owner if owner >= 0 else i) for i, owner in enumerate(net.param_owners)}
    done = {ids[i] for i, (layer_id, _) in enumerate(net.param_layer_indices)
            if names[layer_id] in filled}
    unfilled = []
    for i, (layer_id, _) in enumerate(net.param_layer_indices):
        name = names[layer_id]
        if ids[i] not in done and name not in unfilled:
            unfilled.append(name)
    if unfilled:
        log.warning("%s: no weights for layer%s %s of net '%s' (no layer of that name in the "
                    "file): %s the fillers' initial values, not trained ones; rename the layer "
                    "to the file's name for it, or check that this is the file for this net"
                    % (path, "s" if len(unfilled) > 1 else "",
                       ", ".join("'%s'" % n for n in unfilled), net.name,
                       "they keep" if len(unfilled) > 1 else "it keeps"))


def copy_trained_layers_from_param(net, source, path="<NetParameter>"):
    """Copy blobs layer by layer name; layers absent from the net are ignored (fine-tuning).
    Returns the names of the net's layers that were given blobs."""
    layers = net.layer_dict
    if not len(source.layer):
        raise ProtoError("the weights file holds no layers (not a .caffemodel, or written "
                         "incompletely)", path)
    copied = set()
    for src in source.layer:
        target = layers.get(src.name)
        if target is None:
            log.info("Ignoring source layer %s", src.name)
            continue
        if not len(src.blobs) and not target.blobs:
            continue
        copied.add(src.name)
        log.debug("Copying source layer %s", src.name)
        if len(src.blobs) != len(target.blobs):
            hint = ""
            if target.type == "BN" and {len(src.blobs), len(target.blobs)} == {2, 4}:
                hint = ("; a BN layer with 4 blobs is PSPNet's (its bn_param sets slope_filler, "
                        "bias_filler, momentum, eps or frozen), one with 2 SegNet's or ENet's")
            raise ShapeError("%s: incompatible number of blobs for layer '%s': the file has %d, "
                             "the net's layer (type %s) has %d%s"
                             % (path, src.name, len(src.blobs), target.type, len(target.blobs),
                                hint))
        for j, (bp, blob) in enumerate(zip(src.blobs, target.blobs)):
            if not blob.shape_equals(bp):
                raise ShapeError(
                    "%s: cannot copy param %d weights from layer '%s'; shape mismatch. Source "
                    "param shape is %s; target param shape is %s. To learn this layer's params "
                    "from scratch rather than copying from a saved net, rename the layer."
                    % (path, j, src.name, _fmt(proto_shape(bp)), _fmt(blob.shape)))
            try:
                blob.from_proto(bp, reshape=False)
            except ShapeError as exc:
                raise ShapeError("%s: layer '%s' param %d: %s" % (path, src.name, j, exc)) \
                    from None
            _warn_nonfinite(blob.data, path, src.name, j, _is_constant(target, j))
    if not copied and any(layer.blobs for layer in net.layers):
        log.warning("%s: no layer of the weights file matches a layer with parameters of net "
                    "'%s' by name; nothing was copied (layers are matched by name)",
                    path, net.name)
    return copied


def _is_constant(layer, index):
    """Whether blob ``index`` of ``layer`` is a constant the net never learns: a Parameter
    layer's blob with ``lr_mult: 0`` (as an imported graph's constants are, e.g. the -inf
    padding of a max pooling built from its windows)."""
    specs = layer.layer_param.param
    return (layer.type == "Parameter" and index < len(specs)
            and specs[index].HasField("lr_mult") and specs[index].lr_mult == 0)


def _warn_nonfinite(arr, path, layer, index, constant=False):
    """Warn about NaN and infinities in copied weights, which a diverged run leaves; in a
    constant (:func:`_is_constant`) infinities are values the net was built with, and only
    NaN is warned about."""
    ok = ~np.isnan(arr) if constant else np.isfinite(arr)
    if not ok.all():
        bad = int(arr.size - ok.sum())
        log.warning("%s: param %d of layer '%s' holds %d NaN or infinite values out of %d: "
                    "these weights come from a run that diverged; use an earlier snapshot",
                    path, index, layer, bad, arr.size)


def _fmt(shape):
    return "%s (%d)" % (" ".join(str(d) for d in shape), int(np.prod(shape, dtype=np.int64)))


def copy_trained_layers_hdf5(net, path):
    h5py = weights_file.h5py_module()
    path = os.fspath(path)
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise ProtoError("cannot open as HDF5: %s" % exc, path) from None
    with f:
        if "data" not in f:
            raise ProtoError("HDF5 weights file has no 'data' group", path)
        data = f["data"]
        copied = set()
        for name, layer in net.layer_dict.items():
            if name not in data:
                continue
            copied.add(name)
            group = data[name]
            # Caffe writes a param shared with an earlier layer's (param { name: ... }) only
            # at its owner: such a dataset may be missing (the owner's values are the ones)
            record = net.records[net.layer_index(name)]
            shared = {j for j, pid in enumerate(record.param_ids) if net.param_owners[pid] >= 0}
            if len(group) > len(layer.blobs) or len(group) < len(layer.blobs) - len(shared):
                raise ShapeError("%s: incompatible number of blobs for layer '%s': the file has "
                                 "%d, the net's layer has %d"
                                 % (path, name, len(group), len(layer.blobs)))
            for j, blob in enumerate(layer.blobs):
                key = str(j)
                if key not in group:
                    if j in shared:
                        continue
                    raise ShapeError("%s: layer '%s' has no dataset '%s'" % (path, name, key))
                arr = group[key][...]
                if tuple(arr.shape) != blob.shape:
                    raise ShapeError(
                        "%s: cannot copy param %d weights from layer '%s'; shape mismatch. "
                        "Source param shape is %s; target param shape is %s."
                        % (path, j, name, _fmt(arr.shape), _fmt(blob.shape)))
                blob.data[...] = arr
                _warn_nonfinite(blob.data, path, name, j, _is_constant(layer, j))
    return copied


def save_hdf5(net, path, write_diff=False):
    def fill(f):
        groups = [("data", f.create_group("data"))]
        if write_diff:
            groups.append(("diff", f.create_group("diff")))
        for name, layer in zip(net.layer_names, net.layers):
            if not layer.blobs:
                continue
            for what, g in groups:
                lg = g.create_group(name)
                for j, blob in enumerate(layer.blobs):
                    arr = blob.cpu_data() if what == "data" else blob.cpu_diff()
                    lg.create_dataset(str(j), data=arr)

    write_hdf5(os.fspath(path), fill)
