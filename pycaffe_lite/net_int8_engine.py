"""The engine each layer of an Intel Caffe int8 net gets there, which decides where it
computes in int8 (docs/int8.md, "Which layers run in int8: the engines").

Intel Caffe's net engine is the net's ``engine``, or the build's default ``MKLDNN`` when it is
empty; a layer naming no engine takes the net's, and a layer's ``MKL2017`` in an ``MKLDNN``
net (or ``MKLDNN`` in an ``MKL2017`` one) takes the net's too. Its layer factory then picks,
per layer, the engine of the layer's own parameters when set, else the layer's engine string
up to its ``:``, else ``CAFFE``. Only ``MKLDNN`` layers read ``quantization_param`` and pass
int8 values on; the others compute in float.

Its net compiler's fusions read the engines otherwise (:func:`fusion_mkldnn`): the strings as
written (before the ``MKL2017`` swap), a prefix ``MKLDNN`` without ``:DLA`` after it.
"""

from .proto import caffe_pb2

DEFAULT_ENGINE = "MKLDNN"  # USE_MKLDNN_AS_DEFAULT_ENGINE, the build's default
_PARAMS = {"Convolution": "convolution_param", "InnerProduct": "inner_product_param",
           "Pooling": "pooling_param", "ReLU": "relu_param", "Concat": "concat_param",
           "Eltwise": "eltwise_param"}
_MKLDNN_ENUM = 4  # every Engine enum's MKLDNN (DEFAULT 0, CAFFE 1, CUDNN 2, MKL2017 3)


def net_engine(net):
    """The net's engine as Intel Caffe's ``Net::Init`` sets it."""
    return net.param.engine or DEFAULT_ENGINE


def layer_engine(net, lp):
    """The engine (``"MKLDNN"``, ``"CAFFE"``, ``"MKL2017"``, ``"CUDNN"``) Intel Caffe's layer
    factory gives layer ``lp`` of ``net``."""
    field = _PARAMS.get(lp.type)
    sub = getattr(lp, field) if field is not None else None
    if sub is not None and sub.engine:
        return sub.Engine.Name(sub.engine)
    net_e, own = net_engine(net), lp.engine.strip()
    text = own or net_e
    if own == "MKL2017" and net_e == "MKLDNN":
        text = "MKLDNN"
    elif own == "MKLDNN" and net_e == "MKL2017":
        text = "MKL2017"
    name = text.split(":", 1)[0].strip()
    if name == "MKLDNN":
        if lp.type == "InnerProduct" and lp.inner_product_param.transpose:
            return "CAFFE"
        if lp.type == "Pooling" and \
                lp.pooling_param.pool == caffe_pb2.PoolingParameter.STOCHASTIC:
            return "CAFFE"
        return name
    if name == "MKL2017":
        if lp.type == "InnerProduct" or (lp.type == "Convolution" and any(
                d > 1 for d in lp.convolution_param.dilation)) or (
                lp.type == "Concat" and lp.concat_param.axis != 1):
            return "CAFFE"
        return name
    if name == "CUDNN" and lp.type not in ("InnerProduct", "Concat", "Eltwise"):
        return name
    return "CAFFE"


def is_mkldnn(net, lp):
    """Whether layer ``lp`` is one of Intel Caffe's MKL-DNN layers (the int8 ones)."""
    return layer_engine(net, lp) == "MKLDNN"


def fusion_mkldnn(net, lp):
    """Whether the convolution + ReLU and InnerProduct + ReLU fusion rules of Intel Caffe's
    net compiler take layer ``lp`` (a Convolution, InnerProduct or ReLU) as MKL-DNN: its
    parameters' engine is ``MKLDNN``, or unset and its engine string (the net's when empty)
    starts with ``MKLDNN`` with no ``:DLA`` after it. Both rules read
    ``convolution_param.engine`` for the convolution and the InnerProduct alike."""
    sub = lp.relu_param.engine if lp.type == "ReLU" else lp.convolution_param.engine
    if sub == _MKLDNN_ENUM:
        return True
    if sub:
        return False
    text = lp.engine or net_engine(net)
    return text.startswith("MKLDNN") and text.find(":DLA", 6) < 0
