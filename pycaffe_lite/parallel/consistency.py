"""Every rank of a data-parallel job must train the same model, or the job stops at once.

The ranks average their gradients bucket by bucket, so a rank whose net or solver differs
(an edited prototxt on one host: another ``num_output``, an extra layer, another
``base_lr``, ``iter_size`` or ``max_iter``; a resume from another snapshot) would either make
a collective fail deep inside MPI, wait in one until the collective timeout, or train
silently wrong. :func:`check_same_training` runs before rank 0's weights are broadcast: each
rank describes its train net (every layer's fields and its params' shapes; data paths aside,
which may differ between machines), the solver fields that shape the updates (not those that
only rank 0 uses: display, tests, snapshots) and its iteration; the ranks compare a digest of
it, and where the digests differ, the descriptions, so that the error names the rank, its
host and what differs from rank 0.

:func:`share_data_streams` then gives every rank rank 0's place in the data stream that the
TRAIN ``Data`` and ``HDF5Data`` layers share out by rank (record i to rank i mod N): the
records a ``rand_skip`` skipped, and an ``HDF5Data`` layer's shuffled order of files and rows
with the generator that reshuffles them. Each rank drew these from its own random stream
(``random_seed + rank``), so rank r would otherwise keep every N-th record of another order
than rank 0's: records read twice an epoch and others never.
"""

import hashlib
import logging
import os
import socket

import numpy as np

from ..errors import CaffeError

log = logging.getLogger("pycaffe_lite")

#: SolverParameter fields the ranks may give different values: the net's own files (the
#: built nets are compared), what only rank 0 does (display, tests, snapshots), a rank's
#: device and random seed, the weights rank 0 loads and broadcasts
RANK_LOCAL_SOLVER_FIELDS = frozenset((
    "net", "net_param", "train_net", "test_net", "train_net_param", "test_net_param",
    "train_state", "test_state", "test_iter", "test_interval", "test_compute_loss",
    "test_initialization", "display", "average_loss", "snapshot", "snapshot_prefix",
    "snapshot_diff", "snapshot_format", "snapshot_after_train", "solver_mode", "device_id",
    "random_seed", "debug_info", "weights", "eval_type", "ap_version",
    "show_per_class_result", "store_blobs_in_old_format"))

#: the TRAIN data layers that share their records out by rank, and the parts of their state
#: each rank keeps its own of (a Data layer's generator draws its random crops and mirrors)
SHARED_STREAMS = {"Data": ("rng",), "HDF5Data": ()}

#: at most this many differences are spelled out per rank
_SHOWN = 4


def _repeated(field):
    known = getattr(field, "is_repeated", None)
    return known if known is not None else field.label == field.LABEL_REPEATED  # older protobuf


def _value(field, value):
    if _repeated(field):
        return "[%s]" % ", ".join(_scalar(field, v) for v in value)
    return _scalar(field, value)


def _scalar(field, value):
    if field.type == field.TYPE_ENUM:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else str(value)
    if field.type == field.TYPE_STRING:
        return '"%s"' % value
    if field.type == field.TYPE_BYTES:
        return "<%d bytes>" % len(value)
    if field.type == field.TYPE_FLOAT:  # the shortest text that gives the same float32
        for digits in range(6, 10):
            text = "%.*g" % (digits, value)
            if np.float32(float(text)) == np.float32(value):
                return text
    if field.type == field.TYPE_DOUBLE:
        return repr(float(value))
    return str(value)


def flatten(message, prefix="", skip=frozenset()):
    """``[(dotted field path, value text, default text)]`` of a protobuf message's fields
    that do not hold their default (a value written out as the default reads as unset)."""
    out = []
    for field, value in message.ListFields():
        if not prefix and field.name in skip:
            continue
        name = prefix + field.name
        if field.type == field.TYPE_MESSAGE:
            if _repeated(field):
                for i, item in enumerate(value):
                    out.extend(flatten(item, "%s[%d]." % (name, i)))
            else:
                out.extend(flatten(value, name + "."))
        elif _repeated(field) or value != field.default_value:
            default = "[]" if _repeated(field) else \
                _scalar(field, field.default_value)
            out.append((name, _value(field, value), default))
    return out


#: string fields that name files or folders (data sources, mean files, label maps, where
#: outputs go): each machine may keep its own copy elsewhere
_PATH_FIELDS = frozenset(("source", "mean_file", "root_folder", "file_name", "output_directory",
                          "output_name_prefix", "save_file", "video_file", "prefix"))


def _clear_paths(message):
    for field, value in message.ListFields():
        if field.type == field.TYPE_MESSAGE:
            for item in (value if _repeated(field) else [value]):
                _clear_paths(item)
        elif field.type == field.TYPE_STRING and (field.name in _PATH_FIELDS or
                                                  field.name.endswith("_file")):
            message.ClearField(field.name)


def _paths_aside(layer_param):
    """A copy of a LayerParameter without the paths of its files (each machine may keep its
    own)."""
    copy = type(layer_param)()
    copy.CopyFrom(layer_param)
    _clear_paths(copy)
    return copy


def describe(solver):
    """What must be the same on every rank: {"net": [(layer name, type, fields, param
    shapes)], "solver": [(field, value)], "iteration": [(what, value)]}."""
    net = solver.net
    layers = []
    for lp, rec in zip(net.param.layer, net.records):
        shapes = tuple("x".join(str(d) for d in blob.shape) or "scalar"
                       for blob in rec.layer.blobs)
        layers.append((lp.name, lp.type, tuple(flatten(_paths_aside(lp))), shapes))
    settings = [("class", type(solver).__name__, "")]
    settings += flatten(solver.param, skip=RANK_LOCAL_SOLVER_FIELDS)
    iteration = [("iter", str(solver.iter), "0"),
                 ("current_step", str(getattr(solver, "current_step", 0)), "0")]
    return {"net": layers, "solver": settings, "iteration": iteration}


def digest(description):
    """A 48-bit digest (exact in a float64, which NCCL's max reduces) of a description."""
    text = repr(sorted(description.items())).encode()
    return int.from_bytes(hashlib.sha256(text).digest()[:6], "big")


def _mpi_of(comm):
    from .comm import MPIComm
    if isinstance(comm, MPIComm):
        return comm
    mpi = getattr(comm, "mpi", None)
    return mpi if isinstance(mpi, MPIComm) else None


def check_same_training(solver, comm):
    """Collective (every rank, before the first broadcast): a CaffeError on every rank when
    one rank's train net, solver or iteration differs from rank 0's, naming the ranks, their
    hosts and the differences."""
    if comm.size == 1:
        return
    mine = describe(solver)
    code = digest(mine)
    mpi = _mpi_of(comm)
    if mpi is None:  # e.g. pycaffe's caffe.NCCL alone: the digests' largest and smallest
        if comm.agree(code) == -comm.agree(-code):
            return
        raise CaffeError("the %d ranks do not train the same model: their train nets, solver "
                         "settings or iterations differ (this is rank %d, solver %s); every "
                         "rank must run the same solver and net files"
                         % (comm.size, comm.rank, solver.where))
    where = (code, socket.gethostname(), os.getpid(), solver.where)
    everyone = mpi.allgather_object(where, "the check that every rank trains the same model")
    if all(w[0] == everyone[0][0] for w in everyone):
        return
    described = mpi.allgather_object(mine, "the ranks' descriptions of their models")
    raise CaffeError(mismatch_message(everyone, described))


def _rank(r, where):
    return "rank %d (host %s, pid %d, solver %s)" % (r, where[r][1], where[r][2], where[r][3])


def mismatch_message(where, described):
    """The error for ranks whose descriptions differ from rank 0's: ``where`` holds each
    rank's (digest, host, pid, solver file), ``described`` each rank's :func:`describe`."""
    parts = []
    for r in range(1, len(described)):
        if where[r][0] == where[0][0]:
            continue
        found = differences(described[0], described[r], r)
        shown = found[:_SHOWN] + (["and %d more" % (len(found) - _SHOWN)]
                                  if len(found) > _SHOWN else [])
        parts.append("%s differs from %s: %s" % (_rank(r, where), _rank(0, where),
                                                 "; ".join(shown)))
    return ("the ranks do not train the same model, so their gradients cannot be averaged: "
            "%s; every rank must run the same solver and net (data paths aside)"
            % " / ".join(parts))


def _fields_differ(ours, theirs, r, what):
    a = {name: text for name, text, _ in ours}
    b = {name: text for name, text, _ in theirs}
    defaults = {name: "%s (the default)" % default for name, _, default in ours + theirs}
    out = []
    for name in list(a) + [n for n in b if n not in a]:
        if a.get(name) != b.get(name):
            out.append("%s%s is %s on rank %d, %s on rank 0"
                       % (what, name, b.get(name, defaults[name]), r,
                          a.get(name, defaults[name])))
    return out


def differences(ref, other, r):
    """What rank ``r``'s description ``other`` has otherwise than rank 0's ``ref``."""
    out = _fields_differ(ref["iteration"], other["iteration"], r, "the solver's ")
    out += _fields_differ(ref["solver"], other["solver"], r, "solver field ")
    layers0 = {layer[0]: (i, layer) for i, layer in enumerate(ref["net"])}
    layers = {layer[0]: (i, layer) for i, layer in enumerate(other["net"])}
    for name, (_, (_, kind, fields, shapes)) in layers.items():
        if name not in layers0:
            out.append("layer '%s' (%s) is in rank %d's train net only" % (name, kind, r))
            continue
        _, (_, kind0, fields0, shapes0) = layers0[name]
        label = "layer '%s' (%s)" % (name, kind0)
        if kind != kind0:
            out.append("%s is a %s on rank %d" % (label, kind, r))
            continue
        found = _fields_differ(fields0, fields, r, label + ": ")
        out += found
        if not found and shapes != shapes0:
            out.append("%s: its params are %s on rank %d, %s on rank 0"
                       % (label, ", ".join(shapes) or "none", r, ", ".join(shapes0) or "none"))
    for name, (_, (_, kind, _, _)) in layers0.items():
        if name not in layers:
            out.append("layer '%s' (%s) is missing from rank %d's train net" % (name, kind, r))
    order0 = [layer[0] for layer in ref["net"] if layer[0] in layers]
    order = [layer[0] for layer in other["net"] if layer[0] in layers0]
    for name, name0 in zip(order, order0):
        if name != name0:
            out.append("rank %d's train net runs layer '%s' where rank 0's runs '%s' (the "
                       "layers come in another order)" % (r, name, name0))
            break
    return out or ["the descriptions differ"]


def _same_state(a, b):
    if a.keys() != b.keys():
        return False
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            if not np.array_equal(np.asarray(x), np.asarray(y)):
                return False
        elif x != y:
            return False
    return True


def _random_start(layer):
    """Whether the layer's place in its stream came from its random generator."""
    param = layer.layer_param
    if layer.type == "HDF5Data":
        return bool(param.hdf5_data_param.shuffle)
    return bool(param.data_param.rand_skip)


def share_data_streams(solver, comm):
    """Collective (every rank, after :func:`check_same_training`): the TRAIN net's Data and
    HDF5Data layers take rank 0's place in their stream (see the module's text)."""
    if comm.size == 1:
        return
    net = solver.net
    layers = [(name, layer) for name, layer in zip(net.layer_names, net.layers)
              if layer.type in SHARED_STREAMS and callable(getattr(layer, "get_state", None))]
    if not layers:
        return
    mpi = _mpi_of(comm)
    if mpi is None:  # pycaffe's caffe.NCCL alone: no way to send the states
        for name, layer in layers:
            if _random_start(layer) and comm.rank == 0:
                log.warning("layer '%s' (%s): without MPI the ranks cannot share the shuffled "
                            "order or random skip rank 0 drew: each rank keeps every %d-th "
                            "record of an order of its own", name, layer.type, comm.size)
        return
    states = mpi.bcast_object([layer.get_state() for _, layer in layers]
                              if comm.rank == 0 else None, 0)
    for (name, layer), state in zip(layers, states):
        own = layer.get_state()
        state = dict(state)
        for key in SHARED_STREAMS[layer.type]:
            if key in own:
                state[key] = own[key]
        if not _same_state(state, own):
            layer.set_state(state)
