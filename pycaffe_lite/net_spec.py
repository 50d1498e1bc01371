"""Writing nets in Python: pycaffe's ``caffe.net_spec`` (``NetSpec``, ``layers``, ``params``).

``layers.Convolution(bottom, kernel_size=5, num_output=20)`` describes a layer and returns its
output (a :class:`Top`; a tuple of them for ``ntop`` > 1; the :class:`Function` itself for
``ntop=0``). Keyword arguments become fields of the layer's own ``<type>_param`` message when
it has such a field (``Convolution`` -> ``convolution_param``, found through the
``LayerParameter`` descriptor), otherwise fields of the ``LayerParameter`` itself; arguments
whose name ends in ``param`` (``transform_param``, ``param``, ``loss_param`` ...) always go to
the ``LayerParameter``. Dicts become messages, lists repeated fields (a single value is
accepted for a repeated field) and enum values come from ``params``, e.g.
``params.Pooling.MAX`` (an enum value's name as a string works too). Two arguments are not
fields: ``ntop`` (number of tops) and ``in_place`` (the tops reuse the bottoms' names).

Blob and layer names come from the :class:`NetSpec` attribute a top is assigned to; other tops
get automatic names, the layer type followed by a counter (``Convolution1``). A layer is named
after its first top.
"""

import collections
import importlib
import importlib.util

from google.protobuf import descriptor as _descriptor

from .errors import CaffeError
from .proto import caffe_pb2

__all__ = ["NetSpec", "Top", "Function", "layers", "params", "to_proto", "param_name_dict",
           "assign_proto"]


class NetSpecError(CaffeError, AttributeError):
    """A layer argument that is not a field of the layer's messages, or a bad value for one.

    It is also an ``AttributeError``, which is what pycaffe raises for unknown fields.
    """


class NetSpecTypeError(CaffeError, TypeError):
    """A layer input that is not a Top (a ``TypeError`` too, as in pycaffe)."""


def param_name_dict():
    """{layer type: name of its parameter field without ``_param``}, from the
    ``LayerParameter`` descriptor: ``PoolingParameter`` at ``pooling_param`` gives
    ``{"Pooling": "pooling"}``."""
    found = {}
    for field in caffe_pb2.LayerParameter.DESCRIPTOR.fields:
        if not field.name.endswith("_param") or field.message_type is None:
            continue
        type_name = field.message_type.name
        if type_name.endswith("Parameter"):
            found[type_name[:-len("Parameter")]] = field.name[:-len("_param")]
    return found


_PARAM_NAMES = param_name_dict()


def _field(message, name):
    try:
        return message.DESCRIPTOR.fields_by_name[name]
    except KeyError:
        raise NetSpecError("%s has no field '%s'" % (message.DESCRIPTOR.name, name)) from None


def _is_repeated(field):
    flag = getattr(field, "is_repeated", None)  # protobuf >= 5; ``label`` before (gone in 7)
    if flag is not None:
        return bool(flag)
    return field.label == _descriptor.FieldDescriptor.LABEL_REPEATED


def _scalar(field, value, where):
    """``value`` converted for a scalar (non-message) field; enum names become numbers."""
    if field.enum_type is not None and isinstance(value, str):
        entry = field.enum_type.values_by_name.get(value)
        if entry is None:
            raise NetSpecError("%s: '%s' is not a value of enum %s (values: %s)"
                               % (where, value, field.enum_type.name,
                                  ", ".join(field.enum_type.values_by_name)))
        return entry.number
    return value


def assign_proto(proto, name, val):
    """Set field ``name`` of message ``proto`` from a Python value: dicts fill messages, lists
    fill repeated fields (a lone value fills a repeated field with one entry), anything else is
    assigned."""
    field = _field(proto, name)
    where = "%s.%s" % (proto.DESCRIPTOR.name, name)
    try:
        if _is_repeated(field):
            values = list(val) if isinstance(val, (list, tuple)) else [val]
            container = getattr(proto, name)
            for item in values:
                if field.message_type is not None:
                    if isinstance(item, dict):
                        entry = container.add()
                        for k, v in item.items():
                            assign_proto(entry, k, v)
                    elif hasattr(item, "DESCRIPTOR"):
                        container.add().CopyFrom(item)
                    else:
                        raise NetSpecError("%s: a message field needs dicts, got %r"
                                           % (where, item))
                else:
                    container.append(_scalar(field, item, where))
        elif field.message_type is not None:
            if isinstance(val, dict):
                for k, v in val.items():
                    assign_proto(getattr(proto, name), k, v)
            elif hasattr(val, "DESCRIPTOR"):
                getattr(proto, name).CopyFrom(val)
            else:
                raise NetSpecError("%s is a %s message and needs a dict, got %r"
                                   % (where, field.message_type.name, val))
        else:
            setattr(proto, name, _scalar(field, val, where))
    except NetSpecError:
        raise
    except (TypeError, ValueError) as exc:
        raise NetSpecError("%s: cannot take %r: %s" % (where, val, exc)) from None


class Top:
    """One output blob of a layer (the ``n``-th top of ``fn``)."""

    def __init__(self, fn, n):
        self.fn = fn
        self.n = n

    def to_proto(self):
        """A NetParameter with every layer this top depends on."""
        return to_proto(self)

    def _to_proto(self, layers, names, autonames):
        return self.fn._to_proto(layers, names, autonames)

    def __repr__(self):
        return "<Top %d of %s>" % (self.n, self.fn.type_name)


class Function:
    """A layer: its type, its inputs (Tops of other layers) and its parameters."""

    def __init__(self, type_name, inputs, params):
        self.type_name = type_name
        for i, inp in enumerate(inputs):
            if not isinstance(inp, Top):
                raise NetSpecTypeError("%s input %d is not a Top (it is a %s): pass layer "
                                       "outputs as the positional arguments"
                                       % (type_name, i, type(inp).__name__))
        self.inputs = tuple(inputs)
        params = dict(params)
        self.ntop = params.pop("ntop", 1)
        self.in_place = params.pop("in_place", False)
        self.params = params
        if not isinstance(self.ntop, int) or self.ntop < 0:
            raise NetSpecError("%s: ntop must be a non-negative int, got %r"
                               % (type_name, self.ntop))
        self.tops = tuple(Top(self, n) for n in range(self.ntop))

    def _top_name(self, top, names, autonames):
        if top not in names:
            autonames[self.type_name] += 1
            names[top] = self.type_name + str(autonames[self.type_name])
        return names[top]

    def _layer_name(self, names, autonames):
        if self not in names:
            if self.ntop > 0:
                names[self] = self._top_name(self.tops[0], names, autonames)
            else:
                autonames[self.type_name] += 1
                names[self] = self.type_name + str(autonames[self.type_name])
        return names[self]

    def _to_proto(self, layers, names, autonames):
        if self in layers:
            return
        bottoms = []
        for inp in self.inputs:
            inp._to_proto(layers, names, autonames)
            bottoms.append(layers[inp.fn].top[inp.n])
        layer = caffe_pb2.LayerParameter()
        layer.type = self.type_name
        layer.bottom.extend(bottoms)
        if self.in_place:
            if len(bottoms) != self.ntop:
                raise NetSpecError("%s with in_place=True needs as many tops as bottoms "
                                   "(%d bottoms, ntop=%d)"
                                   % (self.type_name, len(bottoms), self.ntop))
            layer.top.extend(bottoms)
        else:
            layer.top.extend(self._top_name(t, names, autonames) for t in self.tops)
        layer.name = self._layer_name(names, autonames)
        own = _PARAM_NAMES.get(self.type_name)
        for key, value in self.params.items():
            if key.endswith("param") or own is None:
                target = layer
            else:
                own_msg = getattr(layer, own + "_param")
                target = own_msg if key in own_msg.DESCRIPTOR.fields_by_name else layer
            if key not in target.DESCRIPTOR.fields_by_name:
                where = "LayerParameter"
                if own is not None and not key.endswith("param"):
                    where = "%sParameter nor LayerParameter" % self.type_name
                raise NetSpecError("layer %s (%s): unknown parameter '%s' (not a field of %s)"
                                   % (layer.name, self.type_name, key, where))
            try:
                assign_proto(target, key, value)
            except NetSpecError as exc:
                raise NetSpecError("layer %s (%s): %s" % (layer.name, self.type_name, exc)) \
                    from None
        layers[self] = layer

    def __repr__(self):
        return "<Function %s>" % self.type_name


def to_proto(*tops):
    """A NetParameter holding every layer needed to compute ``tops`` (automatic names)."""
    layers = collections.OrderedDict()
    autonames = collections.Counter()
    for top in tops:
        top._to_proto(layers, {}, autonames)
    net = caffe_pb2.NetParameter()
    net.layer.extend(layers.values())
    return net


class NetSpec:
    """Named tops: assign layer outputs as attributes (or items); :meth:`to_proto` gives the
    NetParameter with those names."""

    def __init__(self):
        super().__setattr__("tops", collections.OrderedDict())

    def __setattr__(self, name, value):
        self.tops[name] = value

    def __getattr__(self, name):
        if name.startswith("__") or name == "tops":
            raise AttributeError(name)
        try:
            return self.tops[name]
        except KeyError:
            raise NetSpecError("NetSpec has no top named '%s' (tops: %s)"
                               % (name, ", ".join(self.tops) or "none yet")) from None

    def __setitem__(self, name, value):
        self.tops[name] = value

    def __getitem__(self, name):
        return self.__getattr__(name)

    def __delitem__(self, name):
        del self.tops[name]

    def __contains__(self, name):
        return name in self.tops

    def keys(self):
        return list(self.tops.keys())

    def vals(self):
        return list(self.tops.values())

    def to_proto(self):
        names = {value: key for key, value in self.tops.items()}
        autonames = collections.Counter()
        layers = collections.OrderedDict()
        for top in self.tops.values():
            top._to_proto(layers, names, autonames)
        net = caffe_pb2.NetParameter()
        net.layer.extend(layers.values())
        return net


class Layers:
    """``layers.<Type>(*bottoms, **params)`` describes a layer of that type.

    ``package``: a module whose own attributes take precedence. ``pycaffe_lite.layers`` is
    both this object (pycaffe's ``caffe.layers``) and the package of built-in layers, so the
    package's submodules and functions stay reachable through it.
    """

    def __init__(self, package=None):
        self.__dict__["_package"] = package
        if package is not None:
            self.__dict__["__name__"] = package.__name__
            self.__dict__["__path__"] = getattr(package, "__path__", [])

    def __getattr__(self, type_name):
        if type_name.startswith("__"):
            raise AttributeError(type_name)
        package = self.__dict__.get("_package")
        if package is not None:
            if type_name in vars(package):
                return vars(package)[type_name]
            if type_name[:1].islower() and importlib.util.find_spec(
                    package.__name__ + "." + type_name) is not None:
                return importlib.import_module(package.__name__ + "." + type_name)

        def layer_fn(*args, **kwargs):
            fn = Function(type_name, args, kwargs)
            if fn.ntop == 0:
                return fn
            if fn.ntop == 1:
                return fn.tops[0]
            return fn.tops

        layer_fn.__name__ = type_name
        return layer_fn


class _EnumValues:
    def __init__(self, message_name):
        self._message_name = message_name

    def __getattr__(self, value_name):
        if value_name.startswith("__"):
            raise AttributeError(value_name)
        message = getattr(caffe_pb2, self._message_name, None)
        if message is None:
            raise NetSpecError("params.%s: there is no message %s in caffe.proto"
                               % (self._message_name[:-len("Parameter")], self._message_name))
        try:
            return getattr(message, value_name)
        except AttributeError:
            values = [v.name for e in message.DESCRIPTOR.enum_types for v in e.values]
            raise NetSpecError("%s has no enum value '%s' (values: %s)"
                               % (self._message_name, value_name,
                                  ", ".join(values) or "none")) from None


class Parameters:
    """``params.<Type>.<VALUE>``: the enum constants of ``<Type>Parameter``, e.g.
    ``params.Pooling.MAX``."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _EnumValues(name + "Parameter")


layers = Layers()
params = Parameters()
