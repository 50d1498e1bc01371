"""First-run preparation of the bundled MNIST example's databases.

``pycaffe-lite train --solver models/lenet/lenet_solver.prototxt`` on a fresh clone finds
``models/lenet/mnist_train_lmdb`` and ``mnist_test_lmdb`` missing (they are build products, not
in git). When a Data layer's LMDB source named ``mnist_train_lmdb`` or ``mnist_test_lmdb`` is
missing and the MNIST idx files (``train-``/``t10k-images-idx3-ubyte[.gz]`` and the labels) lie
in its folder or a subfolder of it, they are converted first (by :func:`data.mnist.convert_mnist`,
as ``pycaffe-lite convert_mnist`` does). Any other missing source is left for the data layer
to report.
"""

import glob
import logging
import os
import re

from ..proto import protoio
from ..data.mnist import convert_mnist
from ..errors import CaffeError
from . import paths

log = logging.getLogger("pycaffe_lite")

_MNIST_DB = re.compile(r"^mnist_(train|test)_lmdb$")
_IDX_PREFIX = {"train": "train", "test": "t10k"}


def _net_params(param, search):
    for field in ("net", "train_net"):
        if param.HasField(field):
            found = paths.find(getattr(param, field), search, isdir=False)
            if found:
                yield protoio.read_net_param(found), os.path.dirname(os.path.abspath(found))
    for path in param.test_net:
        found = paths.find(path, search, isdir=False)
        if found:
            yield protoio.read_net_param(found), os.path.dirname(os.path.abspath(found))
    for field in ("net_param", "train_net_param"):
        if param.HasField(field):
            yield getattr(param, field), None
    for net_param in param.test_net_param:
        yield net_param, None


def _find_idx(folder, prefix, kind):
    pattern = "%s-%s-idx%d-ubyte" % (prefix, kind, 3 if kind == "images" else 1)
    for depth in ("", "*"):
        for name in (pattern, pattern + ".gz"):
            hits = sorted(glob.glob(os.path.join(folder, depth, name)))
            if hits:
                return hits[0]
    return None


def missing_mnist_sources(param, solver_path=None):
    """[(db_path, images, labels)] for the example's MNIST LMDBs that can be made."""
    base = os.path.dirname(os.path.abspath(solver_path)) if solver_path else None
    search = paths.search_dirs(base)
    todo = []
    for net_param, net_dir in _net_params(param, search):
        for layer in net_param.layer:
            if layer.type != "Data" or not layer.data_param.source:
                continue
            source = layer.data_param.source
            m = _MNIST_DB.match(os.path.basename(source.rstrip("/")))
            if not m:
                continue
            dirs = [d for d in (net_dir, base) if d]
            if paths.find(source, [x for d in dirs for x in paths.search_dirs(d)]) is not None:
                continue
            parent = os.path.dirname(source) or "."
            folder = paths.find(parent, [x for d in dirs for x in paths.search_dirs(d)],
                                isdir=True)
            if folder is None:
                continue
            prefix = _IDX_PREFIX[m.group(1)]
            images = _find_idx(folder, prefix, "images")
            labels = _find_idx(folder, prefix, "labels")
            db = os.path.join(folder, os.path.basename(source.rstrip("/")))
            if images and labels and all(db != t[0] for t in todo):
                todo.append((db, images, labels))
    return todo


def prepare_missing_sources(param, solver_path=None):
    """Convert the missing MNIST LMDBs of the example (see the module doc)."""
    for db, images, labels in missing_mnist_sources(param, solver_path):
        log.info("%s is missing: converting %s and %s with convert_mnist", db, images, labels)
        try:
            convert_mnist(images, labels, db)
        except CaffeError as exc:
            raise CaffeError("could not prepare %s from %s and %s: %s"
                             % (db, images, labels, exc)) from None
