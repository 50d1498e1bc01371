"""Writing and reading a solver's snapshots in Caffe's formats.

A snapshot is the weights (``<prefix>_iter_N.caffemodel``, or ``.caffemodel.h5`` with
``snapshot_format: HDF5``) and the solver state (``.solverstate`` / ``.solverstate.h5``):
iteration, weights file name, lr-schedule step, the update history, and pycaffe-lite's
``resume_state`` (:mod:`pycaffe_lite.solvers.resume`). States written by Caffe read back too.
The functions take the solver; :meth:`Solver.snapshot` and :meth:`Solver.restore` are the
public entry points. :func:`load_weights` reads the weights a training starts from (the solver's
``weights`` fields, ``--weights``) into the train net and the test nets, as Caffe does.
"""

import logging
import os

import numpy as np

from .. import backend, ranks
from ..proto import protoio
from ..blob import blobproto_to_array, fill_blobproto
from ..errors import CaffeError, ProtoError, SnapshotError
from ..proto import caffe_pb2
from . import paths, resume

log = logging.getLogger("pycaffe_lite")

_SP = caffe_pb2.SolverParameter


# -- writing ---------------------------------------------------------------------------------
def take(solver, scores=()):
    """:meth:`Solver.snapshot`: write both files on rank 0 (None elsewhere); a failure raises
    a SnapshotError naming the last complete snapshot. ``scores``: test scores the weights
    file's name carries (NVCaffe's ``test_and_snapshot_last_epochs``)."""
    if not ranks.root_solver():
        return None
    try:
        model_filename, state_filename = write(solver, scores)
    except (ProtoError, OSError) as exc:
        if solver.last_snapshot:
            where = ("The last complete snapshot, %s, is intact: once this is fixed, resume "
                     "from it with --snapshot %s (solver.restore())"
                     % (solver.last_snapshot, solver.last_snapshot))
        else:
            where = "No earlier snapshot of this run is complete"
        raise SnapshotError("Iteration %d: the snapshot could not be written: %s. %s"
                            % (solver.iter, exc, where)) from None
    solver.last_snapshot = state_filename
    return model_filename


def check_final(solver):
    """Before :meth:`Solver.solve` trains: the snapshot ``snapshot_after_train`` asks for at
    the end must be writable (its folder exists and takes a file), so that a bad
    ``snapshot_prefix`` stops the run before the training, not after it (a CaffeError)."""
    if solver.param.snapshot_after_train and ranks.root_solver():
        paths.check_writable(solver._prefix(), solver.where)


def score_suffix(scores):
    """``_score0_<s0>_score1_<s1>...`` as NVCaffe's SnapshotFilename writes it (a float by
    C++'s default stream format: ``%g``)."""
    return "".join("_score%d_%g" % (i, s) for i, s in enumerate(scores))


def write(solver, scores=()):
    """Write the weights, then the state that names them; (weights file, state file)."""
    fmt = solver.param.snapshot_format
    scored = score_suffix(scores)
    if fmt == _SP.BINARYPROTO:
        model_filename = solver.snapshot_filename(scored + ".caffemodel")
        log.info("Snapshotting to binary proto file %s", model_filename)
        protoio.write_binary(solver.net.to_proto(solver.param.snapshot_diff), model_filename)
    elif fmt == _SP.HDF5:
        model_filename = solver.snapshot_filename(scored + ".caffemodel.h5")
        log.info("Snapshotting to HDF5 file %s", model_filename)
        solver.net.save_hdf5(model_filename, solver.param.snapshot_diff)
    else:
        raise CaffeError("%s: unsupported snapshot_format %d" % (solver.where, fmt))
    return model_filename, write_state(solver, model_filename)


def write_state(solver, model_filename):
    """Write the solver state that refers to ``model_filename``; its file name."""
    extra = resume.dumps(resume.capture(solver))
    if solver.param.snapshot_format == _SP.HDF5:
        filename = solver.snapshot_filename(".solverstate.h5")
        log.info("Snapshotting solver state to HDF5 file %s", filename)
        _write_state_hdf5(solver, filename, model_filename, extra)
    else:
        state = caffe_pb2.SolverState()
        state.iter = solver.iter
        state.learned_net = model_filename
        state.current_step = solver.current_step
        for arr in _history_host(solver):
            fill_blobproto(state.history.add(), arr)
        state.resume_state = extra
        filename = solver.snapshot_filename(".solverstate")
        log.info("Snapshotting solver state to binary proto file %s", filename)
        protoio.write_binary(state, filename)
    return filename


def _history_host(solver):
    return [backend.to_host(h) for h in solver.history]


def _write_state_hdf5(solver, filename, model_filename, extra):
    from ..proto.weights_file import write_hdf5

    def fill(f):
        f.create_dataset("iter", data=np.array([solver.iter], np.int32))
        f.create_dataset("learned_net", data=np.bytes_(model_filename.encode("utf-8")))
        f.create_dataset("current_step", data=np.array([solver.current_step], np.int32))
        group = f.create_group("history")
        for i, arr in enumerate(_history_host(solver)):
            group.create_dataset(str(i), data=np.asarray(arr, np.float32))
        f.create_dataset("resume_state", data=np.void(extra))

    write_hdf5(filename, fill, "HDF5 solver state")


# -- reading ---------------------------------------------------------------------------------
def weight_files(model_lists):
    """The weights files of ``model_lists``: each entry one file or several separated by ','
    (spaces around a name are dropped, as Caffe's ``boost::trim``)."""
    names = []
    for model_list in model_lists:
        names.extend(name.strip() for name in model_list.split(",") if name.strip())
    return names


def load_weights(solver, model_lists):
    """Copy the trained layers of every file of ``model_lists`` (see :func:`weight_files`) into
    the train net and each test net, in order (a later file's layers replace an earlier's). A
    relative name is looked for as the solver's net files are (:mod:`.paths`)."""
    for name in weight_files(model_lists):
        log.info("Finetuning from %s", name)
        found = paths.find(name, solver.search_dirs)
        if found is None:
            raise CaffeError("%s: weights file '%s' not found (a weights: field, or --weights); "
                             "looked in %s" % (solver.where, name,
                                               paths.looked_in(solver.search_dirs)))
        for net in [solver.net] + list(solver.test_nets):
            net.copy_from(found)


def restore(solver, state_file):
    """Load a binary or HDF5 solver state (and the weights it names) into ``solver``."""
    if not os.path.isfile(state_file):
        hint = ""
        if os.path.isfile(state_file + ".h5"):  # BVLC's cifar10 train_full.sh names it so
            hint = (" (%s.h5 exists: a solver with snapshot_format: HDF5 writes its states "
                    "under that name; resume from it)" % state_file)
        raise ProtoError("solver state file not found" + hint, state_file)
    from ..proto.weights_file import is_hdf5
    if state_file.endswith(".h5") or is_hdf5(state_file):
        _restore_hdf5(solver, state_file)
    else:
        _restore_binary(solver, state_file)


def _learned_net_path(learned_net, state_file):
    if isinstance(learned_net, bytes):  # protobuf hands over a non-UTF-8 string as bytes
        learned_net = os.fsdecode(learned_net)
    if os.path.isfile(learned_net):
        return learned_net
    folder = os.path.dirname(os.path.abspath(state_file))
    for candidate in (os.path.join(folder, os.path.basename(learned_net)),
                      os.path.join(folder, learned_net)):
        if os.path.isfile(candidate):
            return candidate
    raise ProtoError("the solver state refers to the weights file '%s', which is not found "
                     "(looked in the working directory and in %s); keep the .caffemodel "
                     "next to its .solverstate" % (learned_net, folder), state_file)


def _restore_binary(solver, state_file):
    from ..proto.weights_file import other_kind, read_expecting  # another kind: say which
    state = read_expecting(state_file, caffe_pb2.SolverState(), "solver state")
    if not len(state.history) and not state.learned_net:
        hint = other_kind(state_file, "solver state")
        if hint:
            raise ProtoError(hint, state_file)
    solver.iter = state.iter
    if state.HasField("learned_net") and state.learned_net:
        solver.net.copy_from(_learned_net_path(state.learned_net, state_file))
    solver.current_step = state.current_step
    history = []
    for i, blob in enumerate(state.history):
        try:
            history.append(blobproto_to_array(blob))
        except CaffeError as exc:
            raise ProtoError("history blob %d: %s (a corrupt solver state)" % (i, exc),
                             state_file) from None
    _set_history(solver, history, state_file)
    _apply_resume_state(solver, state.resume_state if state.HasField("resume_state") else None,
                        state_file)


def _restore_hdf5(solver, state_file):
    from ..proto.weights_file import h5py_module
    h5py = h5py_module()
    try:
        f = h5py.File(state_file, "r")
    except OSError as exc:
        raise ProtoError("cannot open as HDF5: %s" % exc, state_file) from None
    with f:
        for key in ("iter", "current_step", "history"):
            if key not in f:
                raise ProtoError("HDF5 solver state has no '%s' dataset" % key, state_file)
        solver.iter = int(np.asarray(f["iter"][()]).ravel()[0])
        if "learned_net" in f:
            raw = f["learned_net"][()]
            if isinstance(raw, np.ndarray):
                raw = raw.ravel()[0]
            learned = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
            learned = learned.rstrip("\x00")
            if learned:
                solver.net.copy_from(_learned_net_path(learned, state_file))
        solver.current_step = int(np.asarray(f["current_step"][()]).ravel()[0])
        group = f["history"]
        arrays = []
        for i in range(len(group)):
            if str(i) not in group:
                raise ProtoError("HDF5 solver state: history has no dataset '%d'" % i,
                                 state_file)
            arrays.append(np.asarray(group[str(i)][...], np.float32))
        extra = None
        if "resume_state" in f:
            extra = f["resume_state"][()]
            extra = extra.tobytes() if hasattr(extra, "tobytes") else bytes(extra)
    _set_history(solver, arrays, state_file)
    _apply_resume_state(solver, extra, state_file)


def _set_history(solver, arrays, source):
    log.info("%s: restoring history", type(solver).__name__)
    if len(arrays) != len(solver.history):
        n = len(solver.net.learnable_params)
        raise CaffeError(
            "%s: incorrect length of history blobs: the state holds %d, a %s on this net "
            "needs %d (%d learnable params x %d); was it written by another solver type or "
            "for another net?" % (source, len(arrays), type(solver).__name__,
                                  len(solver.history), n, len(solver.state_names)))
    for i, (dst, src) in enumerate(zip(solver.history, arrays)):
        if src.size != dst.size:
            raise CaffeError("%s: history blob %d holds %d values (shape %s), the param it "
                             "belongs to has %d (shape %s)"
                             % (source, i, src.size, src.shape, dst.size, dst.shape))
        xp = backend.get_array_module(dst)
        dst[...] = xp.asarray(src.reshape(dst.shape).astype(np.float32, copy=False))


def _apply_resume_state(solver, extra, source):
    if extra:
        resume.apply(solver, resume.loads(extra, source), source)
    else:
        log.info("%s holds no random-generator or data-position state (written by Caffe?): "
                 "resuming with the current random numbers and data order", source)
