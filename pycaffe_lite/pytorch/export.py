"""Caffe net -> ``model.py`` (a readable ``torch.nn.Module``) and ``weights.pt``."""

import keyword
import logging
import os

from ..errors import CaffeError
from ..proto.protoio import atomic_write_all
from .codegen import FILE_NAMES, HELPERS, Plan, class_identifier, source
# imported for their register_generator side effect
from . import gen_common, gen_detection, gen_forks, gen_neuron, gen_vision  # noqa: F401
from .weights_file import state_dict_bytes

log = logging.getLogger(__name__)


def check_class_name(name):
    if not name.isidentifier() or keyword.iskeyword(name) or name in FILE_NAMES \
            or name in HELPERS:
        raise CaffeError("--class-name %r is not a usable Python class name (an identifier "
                         "that is not a keyword, nor one of %s)"
                         % (name, ", ".join(sorted(FILE_NAMES | set(HELPERS)))))
    return name


def generate(net, class_name=None, train=False, source_name=None):
    """``(text, weights, report)`` for ``net`` (a TEST :class:`pycaffe_lite.Net`, unfolded
    or folded: the layers' own blobs are read). ``report``: the ``class_name``, the net's
    ``inputs`` and ``outputs`` (Caffe blob names), the ``dropped`` layers as ``(name, type)``
    and the ``layers`` as ``(Caffe name, attribute, top blob names)``."""
    plan = Plan(net, train)
    cls = check_class_name(class_name) if class_name else class_identifier(net.name)
    title = "%s as a PyTorch module" % (net.name or "A Caffe net")
    text = source(plan, cls, title, source_name or "a Caffe net")
    compile(text, "model.py", "exec")  # a generator's mistake fails here, not at import
    report = {"class_name": cls, "inputs": [n for n, _ in plan.inputs],
              "outputs": [n for n, _ in plan.outputs()], "dropped": plan.dropped,
              "layers": plan.layers}
    return text, plan.weights, report


def export(net, output_dir, class_name=None, train=False, source_name=None):
    """Writes ``output_dir/model.py`` and ``output_dir/weights.pt`` for ``net``; returns the
    report of :func:`generate`."""
    text, weights, report = generate(net, class_name, train, source_name)
    for name, type_ in report["dropped"]:
        log.info("PyTorch export: dropped layer '%s' (type %s), it only trains", name, type_)
    os.makedirs(output_dir, exist_ok=True)
    # the module and its weights are one pair: both files replaced, or neither
    atomic_write_all([(os.path.join(output_dir, "model.py"), text.encode("utf-8"),
                       "the PyTorch module"),
                      (os.path.join(output_dir, "weights.pt"), state_dict_bytes(weights),
                       "its weights")])
    return report


def build_net(model_path, weights_path=None):
    """The TEST net of a prototxt with its weights, unfolded (each layer keeps its own
    blobs and its own top, as the exported module has them)."""
    from ..net import Net
    from ..proto import caffe_pb2

    return Net(str(model_path), caffe_pb2.TEST,
               weights=str(weights_path) if weights_path else None, fold=False)


def export_files(model_path, weights_path, output_dir, class_name=None, train=False):
    """Builds the net of a prototxt (TEST phase) with its weights, and exports it."""
    net = build_net(model_path, weights_path)
    return net, export(net, output_dir, class_name, train, os.path.basename(str(model_path)))
