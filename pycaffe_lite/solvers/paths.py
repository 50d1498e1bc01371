"""Where the relative paths of a solver (net files, snapshot_prefix, data sources) point.

Caffe opens them relative to the working directory, and so do we first: solver files written
for ``caffe train`` run from the same folder keep working. When a path does not exist there, we
look relative to the solver file's folder, then relative to each folder above it (data sources
also relative to the net file's folder), so that Caffe-style example paths written relative to
a repository root (``models/lenet/mnist_train_lmdb``) work from any directory. When nothing is
found, the error names every place looked at.
"""

import logging
import os
import tempfile

from ..errors import CaffeError

log = logging.getLogger("pycaffe_lite")


def _dedup(dirs):
    out = []
    for d in dirs:
        if d is None:
            continue
        d = os.path.abspath(d)
        if d not in out:
            out.append(d)
    return out


def find(path, base_dirs, isdir=None):
    """``path`` itself if it exists (relative to the working directory), else the first
    ``base_dir/path`` that exists, else None. ``isdir`` restricts to folders or files."""
    def ok(p):
        if isdir is None:
            return os.path.exists(p)
        return os.path.isdir(p) if isdir else os.path.isfile(p)

    if ok(path):
        return path
    if os.path.isabs(path):
        return None
    for base in _dedup(base_dirs):
        candidate = os.path.join(base, path)
        if ok(candidate):
            return candidate
    return None


def search_dirs(folder):
    """``folder`` and every folder above it, nearest first."""
    out = []
    if folder is None:
        return out
    d = os.path.abspath(folder)
    while True:
        out.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            return out
        d = parent


def looked_in(base_dirs):
    places = ["the working directory (%s)" % os.getcwd()]
    others = [d for d in _dedup(base_dirs) if d != os.getcwd()]
    if others:
        places.append("relative to " + ", ".join(others))
    return "; ".join(places)


def resolve_file(path, base_dirs, field, where):
    """The file a solver field names; a CaffeError when it is nowhere."""
    found = find(path, base_dirs, isdir=False)
    if found is None:
        raise CaffeError("%s: %s file '%s' not found; looked in %s. Fix the path in the solver "
                         "or run from the folder it is relative to"
                         % (where, field, path, looked_in(base_dirs)))
    if found != path:
        log.info("%s '%s' resolved to %s", field, path, found)
    return found


def resolve_prefix(prefix, base_dirs):
    """``snapshot_prefix`` with its folder resolved; None when the folder is nowhere."""
    folder = os.path.dirname(prefix)
    if not folder:
        return prefix
    found = find(folder, base_dirs, isdir=True)
    if found is None:
        return None
    return os.path.join(found, os.path.basename(prefix)) if found != folder else prefix


def prefix_error(prefix, base_dirs, where):
    return CaffeError("%s: cannot write to snapshot prefix '%s': its folder '%s' does not exist "
                      "(looked in %s). Create the folder or change snapshot_prefix"
                      % (where, prefix, os.path.dirname(prefix), looked_in(base_dirs)))


def check_writable(prefix, where):
    """Caffe's CheckSnapshotWritePermissions: write and remove a probe file (named uniquely,
    so that trainings sharing a prefix cannot remove each other's)."""
    try:
        fd, probe = tempfile.mkstemp(prefix=os.path.basename(prefix) + "_iter_0.",
                                     suffix=".tempfile", dir=os.path.dirname(prefix) or ".")
        os.close(fd)
        os.remove(probe)
    except OSError as exc:
        raise CaffeError("%s: cannot write to snapshot prefix '%s' (%s). Make sure that the "
                         "directory exists and is writeable"
                         % (where, prefix, exc.strerror or exc)) from None


# (layer parameter message, field) pairs that name files or folders.
SOURCE_FIELDS = (
    ("data_param", "source"), ("data_param", "mean_file"),
    ("transform_param", "mean_file"),
    ("image_data_param", "source"), ("image_data_param", "mean_file"),
    ("hdf5_data_param", "source"),
    ("window_data_param", "source"), ("window_data_param", "mean_file"),
    ("infogain_loss_param", "source"),
)


def resolve_sources(net_param, base_dirs):
    """Rewrite relative data paths of ``net_param``'s layers that do not exist relative to the
    working directory but do exist relative to one of ``base_dirs`` or one of their parents.
    Paths found nowhere are left alone (the layer reports them when it opens them)."""
    dirs = _dedup([d for base in base_dirs for d in search_dirs(base)])
    for layer in net_param.layer:
        for msg_name, field in SOURCE_FIELDS:
            if not layer.HasField(msg_name):
                continue
            msg = getattr(layer, msg_name)
            if not msg.HasField(field):
                continue
            value = getattr(msg, field)
            if not value or os.path.exists(value) or os.path.isabs(value):
                continue
            found = find(value, dirs)
            if found is not None:
                log.info("Layer %s: %s.%s '%s' resolved to %s", layer.name, msg_name, field,
                         value, found)
                setattr(msg, field, found)
