"""Drawing nets as graphs: pycaffe's ``caffe.draw`` without the pydot dependency.

The graph is written as Graphviz DOT text by this module itself. As in Caffe's drawings,
layers are filled ``record`` boxes (colour by type: convolutions red, pooling orange, inner
products purple, in-place layers green, others blue) and blobs are ``octagon`` nodes; an edge
goes from each bottom blob to its layer and from the layer to each top blob, labelled with the
batch size of data layers and the ``num_output`` of convolutions and inner products.

DOT text needs nothing else. Rendering to an image (PNG, SVG, PDF, ...) runs Graphviz's ``dot``
program, which must be on ``PATH``.
"""

import os
import shutil
import subprocess

from .proto import protoio
from .errors import CaffeError
from .proto import caffe_pb2

__all__ = ["get_pydot_graph", "get_dot_graph", "draw_net", "draw_net_to_file",
           "get_pooling_types_dict", "get_layer_lr_mult", "GraphvizNotFoundError",
           "TEXT_FORMATS"]

LAYER_STYLE_DEFAULT = {"shape": "record", "fillcolor": "#6495ED", "style": "filled"}
NEURON_LAYER_STYLE = {"shape": "record", "fillcolor": "#90EE90", "style": "filled"}
BLOB_STYLE = {"shape": "octagon", "fillcolor": "#E0E0E0", "style": "filled"}

#: the layers with a convolution_param, drawn alike: BVLC's two and the forks' depthwise types
_CONVOLUTIONS = ("Convolution", "Deconvolution", "ConvolutionDepthwise", "DepthwiseConvolution")
_TYPE_COLOURS = dict({kind: "#FF5050" for kind in _CONVOLUTIONS},
                     Pooling="#FF9900", InnerProduct="#CC33FF")
_DATA_PARAMS = {"Data": "data_param", "ImageData": "image_data_param",
                "HDF5Data": "hdf5_data_param", "MemoryData": "memory_data_param",
                "WindowData": "window_data_param"}

RANKDIRS = ("LR", "TB", "BT", "RL")
# file endings written as DOT text rather than rendered
TEXT_FORMATS = ("dot", "gv", "raw")


class GraphvizNotFoundError(CaffeError):
    """Rendering an image needs Graphviz's ``dot`` program, which is not on PATH."""


def _pooling_name(value):
    return caffe_pb2.PoolingParameter.PoolMethod.Name(value)


def get_pooling_types_dict():
    """{number: name} of PoolingParameter's pool methods (pycaffe's): {0: 'MAX', 1: 'AVE',
    2: 'STOCHASTIC'}."""
    return {v.number: name for name, v in
            caffe_pb2.PoolingParameter.PoolMethod.DESCRIPTOR.values_by_name.items()}


_LR_MULT_TYPES = _CONVOLUTIONS + ("InnerProduct",)


def get_layer_lr_mult(layer):
    """(weights' lr_mult, bias's lr_mult) of a convolution (the forks' depthwise types too),
    Deconvolution or InnerProduct LayerParameter, as pycaffe's: a ``param`` not given counts
    as lr_mult 1; a ValueError for another type or for more than two ``param``."""
    if layer.type not in _LR_MULT_TYPES:
        raise ValueError("layer '%s': %s layers have no learning rate multipliers (only %s)"
                         % (layer.name, layer.type, ", ".join(_LR_MULT_TYPES)))
    if len(layer.param) > 2:
        raise ValueError("layer '%s' (%s): %d param entries, at most 2 (weights, bias)"
                         % (layer.name, layer.type, len(layer.param)))
    mults = [spec.lr_mult for spec in layer.param] + [1.0, 1.0]
    return mults[0], mults[1]


def _first(values, default=None):
    return values[0] if len(values) else default


def get_edge_label(layer):
    """The label of the edges out of ``layer`` (a LayerParameter), or None."""
    field = _DATA_PARAMS.get(layer.type)
    if field is not None:
        return "Batch %d" % getattr(layer, field).batch_size
    if layer.type in _CONVOLUTIONS:
        return str(layer.convolution_param.num_output)
    if layer.type == "InnerProduct":
        return str(layer.inner_product_param.num_output)
    return None


def _conv_geometry(p):
    kernel = p.kernel_h if p.HasField("kernel_h") else _first(p.kernel_size, 1)
    stride = p.stride_h if p.HasField("stride_h") else _first(p.stride, 1)
    pad = p.pad_h if p.HasField("pad_h") else _first(p.pad, 0)
    return kernel, stride, pad


def get_layer_label(layer, rankdir="LR", display_lrm=False):
    """The text inside a layer's box: name, type and, for convolutions and pooling, kernel
    size, stride and pad (one item per line in LR/RL drawings, space-separated in TB/BT)."""
    sep = " " if rankdir in ("TB", "BT") else "\n"
    parts = [layer.name, "(%s)" % layer.type]
    if layer.type in _CONVOLUTIONS:
        kernel, stride, pad = _conv_geometry(layer.convolution_param)
        parts += ["kernel size: %d" % kernel, "stride: %d" % stride, "pad: %d" % pad]
    elif layer.type == "Pooling":
        p = layer.pooling_param
        kernel = p.kernel_h if p.HasField("kernel_h") else p.kernel_size
        stride = p.stride_h if p.HasField("stride_h") else p.stride
        pad = p.pad_h if p.HasField("pad_h") else p.pad
        parts[1] = "(%s %s)" % (layer.type, _pooling_name(p.pool))
        if p.global_pooling:
            parts.append("global")
        else:
            parts += ["kernel size: %d" % kernel, "stride: %d" % stride, "pad: %d" % pad]
    if display_lrm and len(layer.param):
        lr = ", ".join("%g" % s.lr_mult for s in layer.param)
        decay = ", ".join("%g" % s.decay_mult for s in layer.param)
        parts.append("lr mult: %s" % lr)
        parts.append("decay mult: %s" % decay)
    return sep.join(parts)


def choose_color_by_layertype(layertype):
    return _TYPE_COLOURS.get(layertype, LAYER_STYLE_DEFAULT["fillcolor"])


def _included(layer, phase):
    if phase is None:
        return True
    if len(layer.include) and len(layer.exclude):
        raise CaffeError("layer '%s' has both include and exclude rules; use one kind"
                         % layer.name)
    if len(layer.include):
        return any(not r.HasField("phase") or r.phase == phase for r in layer.include)
    return not any(r.HasField("phase") and r.phase == phase for r in layer.exclude)


def _quote(text, record=False):
    """``text`` as a quoted DOT string; ``record`` also escapes the characters that structure
    record labels ({, }, |, <, >) so that names stay literal."""
    text = str(text).replace("\\", "\\\\").replace('"', '\\"')
    if record:
        for ch in "{}|<>":
            text = text.replace(ch, "\\" + ch)
    return '"%s"' % text.replace("\n", "\\n")


def _attrs(attrs):
    record = attrs.get("shape") == "record"
    return ", ".join("%s=%s" % (k, _quote(v, record and k == "label")) for k, v in attrs.items())


def _as_net_param(net):
    if isinstance(net, caffe_pb2.NetParameter):
        return net
    if hasattr(net, "to_proto") and hasattr(net, "layers") and hasattr(net, "blobs"):
        return net.to_proto()  # a built Net: its layers as set up
    return protoio.read_net_param(net)


def get_dot_graph(caffe_net, rankdir="LR", label_edges=True, phase=None, display_lrm=False):
    """The DOT text of the net (a NetParameter, a prototxt path or text, or a Net).

    ``phase``: None draws every layer; ``caffe_pb2.TRAIN`` / ``TEST`` only those the phase
    includes.
    """
    if rankdir not in RANKDIRS:
        raise CaffeError("rankdir must be one of %s, got %r" % (", ".join(RANKDIRS), rankdir))
    if phase not in (None, caffe_pb2.TRAIN, caffe_pb2.TEST):
        raise CaffeError("phase must be None, TRAIN (0) or TEST (1), got %r" % (phase,))
    param = _as_net_param(caffe_net)
    nodes = {}
    edges = []
    for layer in param.layer:
        if not _included(layer, phase):
            continue
        node = "%s_%s" % (layer.name, layer.type)
        in_place = len(layer.bottom) == 1 and len(layer.top) == 1 and \
            layer.bottom[0] == layer.top[0]
        style = dict(NEURON_LAYER_STYLE if in_place else LAYER_STYLE_DEFAULT)
        if not in_place:
            style["fillcolor"] = choose_color_by_layertype(layer.type)
        label = get_layer_label(layer, rankdir, display_lrm)
        nodes[node] = dict(label=label, **style)
        for b in layer.bottom:
            nodes["%s_blob" % b] = dict(label=b, **BLOB_STYLE)
            edges.append(("%s_blob" % b, node, None))
        edge_label = get_edge_label(layer) if label_edges else None
        for t in layer.top:
            nodes["%s_blob" % t] = dict(label=t, **BLOB_STYLE)
            edges.append((node, "%s_blob" % t, edge_label))
    lines = ["digraph %s {" % _quote(param.name or "G"), "  rankdir=%s;" % rankdir]
    for name, attrs in nodes.items():
        lines.append("  %s [%s];" % (_quote(name), _attrs(attrs)))
    for src, dst, label in edges:
        extra = " [label=%s]" % _quote(label) if label is not None else ""
        lines.append("  %s -> %s%s;" % (_quote(src), _quote(dst), extra))
    lines.append("}")
    return "\n".join(lines) + "\n"


class DotGraph(str):
    """DOT text (a ``str``) with the pydot methods scripts use on pycaffe's graphs:
    ``to_string``, ``create(format=...)``, ``write(path, format=...)`` and, for any format,
    ``create_<format>()`` (``create_png()`` for IPython's ``Image``) and
    ``write_<format>(path)``."""

    def to_string(self):
        return str(self)

    def create(self, format="png", prog="dot"):
        return render(str(self), format, prog)

    def write(self, path, format="raw", prog="dot"):
        data = self.create(format, prog)
        with open(os.fspath(path), "wb") as f:
            f.write(data)

    def write_png(self, path, prog="dot"):
        self.write(path, "png", prog)

    def write_svg(self, path, prog="dot"):
        self.write(path, "svg", prog)

    def write_pdf(self, path, prog="dot"):
        self.write(path, "pdf", prog)

    def write_raw(self, path, prog="dot"):
        self.write(path, "raw", prog)

    def __getattr__(self, name):
        # pydot's per-format methods for any format: create_png(), create_svg(),
        # write_jpg(path), write_dot(path), ...
        for prefix in ("create_", "write_"):
            if name.startswith(prefix) and len(name) > len(prefix):
                fmt = name[len(prefix):]
                if prefix == "create_":
                    return lambda prog="dot", **_: self.create(fmt, prog or "dot")
                return lambda path, prog="dot", **_: self.write(path, fmt, prog or "dot")
        raise AttributeError("%s has no attribute '%s'" % (type(self).__name__, name))


def get_pydot_graph(caffe_net, rankdir="LR", label_edges=True, phase=None, display_lrm=False):
    """pycaffe's name for :func:`get_dot_graph`; the result also has ``create(format=...)``."""
    return DotGraph(get_dot_graph(caffe_net, rankdir, label_edges, phase, display_lrm))


def find_dot(prog="dot"):
    """The path of Graphviz's program, or a :class:`GraphvizNotFoundError`."""
    path = shutil.which(prog)
    if path is None:
        raise GraphvizNotFoundError(
            "Graphviz is not installed: rendering an image needs its '%s' program on PATH "
            "(install Graphviz, e.g. apt-get install graphviz). DOT text output works without "
            "it: write to a .dot file, or use get_dot_graph()." % prog)
    return path


def render(dot_text, format="png", prog="dot"):
    """Rendered bytes of DOT text in ``format`` (png, svg, pdf, ...), through Graphviz."""
    fmt = str(format).lower().lstrip(".")
    if fmt in TEXT_FORMATS:
        return dot_text.encode("utf-8")
    exe = find_dot(prog)
    try:
        done = subprocess.run([exe, "-T" + fmt], input=dot_text.encode("utf-8"),
                              capture_output=True, check=False)
    except OSError as exc:
        raise GraphvizNotFoundError("cannot run Graphviz's %s (%s): %s" % (prog, exe, exc)) \
            from None
    if done.returncode != 0:
        raise CaffeError("Graphviz's %s failed to render format '%s' (exit %d): %s"
                         % (prog, fmt, done.returncode,
                            done.stderr.decode("utf-8", "replace").strip()))
    return done.stdout


def draw_net(caffe_net, rankdir="LR", ext="png", phase=None, display_lrm=False):
    """The net drawn in format ``ext`` as bytes (DOT text for dot/gv/raw)."""
    return render(get_dot_graph(caffe_net, rankdir, phase=phase, display_lrm=display_lrm), ext)


def draw_net_to_file(caffe_net, filename, rankdir="LR", phase=None, display_lrm=False):
    """Draw the net into ``filename``; its ending chooses the format (.dot/.gv/.raw write DOT
    text, anything else is rendered by Graphviz)."""
    filename = os.fspath(filename)
    ext = os.path.splitext(filename)[1].lstrip(".").lower()
    if not ext:
        raise CaffeError("cannot tell the format of '%s': give the file an ending such as "
                         ".png, .svg, .pdf or .dot" % filename)
    data = draw_net(caffe_net, rankdir, ext, phase, display_lrm)
    with open(filename, "wb") as f:
        f.write(data)
