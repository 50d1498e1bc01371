"""DummyData: tops filled by fillers (constant tops once, random ones every forward)."""

from ...errors import CaffeError, ShapeError
from ...fillers import fill
from ...layer import Layer
from ...proto import caffe_pb2
from ...registry import FILLERS, register_layer


@register_layer("DummyData")
class DummyDataLayer(Layer):
    """Tops of fixed shapes filled with filler values, for tests and benchmarks.

    Bottoms: none.
    Tops: one or more blobs. Tops with a ``constant`` filler are filled once at setup; the
    others are refilled at every forward.
    Params: ``dummy_data_param { data_filler (none: constant 0; one for every top, or one per
    top), shape (once for every top, or once per top) }``, or instead of ``shape`` the legacy
    ``num``, ``channels``, ``height``, ``width`` (each given once or once per top).
    """

    exact_num_bottom_blobs = 0
    min_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.dummy_data_param
        num_top = len(top)
        n_fill = len(p.data_filler)
        if n_fill not in (0, 1, num_top):
            raise self.error("Number of data fillers must be 0, 1 or equal to the number of "
                             "tops: %d; you specified %d data fillers." % (num_top, n_fill))
        legacy = len(p.num) or len(p.channels) or len(p.height) or len(p.width)
        if legacy:
            if len(p.shape):
                raise self.error("Both shape and legacy fields (num, channels, height, width) "
                                 "were specified")
            for field in ("num", "channels", "height", "width"):
                n = len(getattr(p, field))
                if n not in (1, num_top):
                    raise self.error("Must specify '%s' once, or once per top blob (%d); "
                                     "specified %d." % (field, num_top, n))
        elif len(p.shape) not in (1, num_top):
            raise self.error("Must specify 'shape' once, or once per top blob (%d); specified "
                             "%d." % (num_top, len(p.shape)))

        if n_fill == 0:
            fillers = [caffe_pb2.FillerParameter(type="constant", value=0.0)]
        else:
            fillers = list(p.data_filler)
        for k, f in enumerate(fillers):
            if f.type not in FILLERS:
                raise self.error("data_filler %d: %s" % (k, FILLERS.unknown_message(f.type)))
        self.fillers = fillers
        # Constant fillers are applied once, here; the others at every forward.
        self.refill = [f.type != "constant" for f in fillers]

        def pick(values, i):
            return values[0] if len(values) == 1 else values[i]

        for i, t in enumerate(top):
            if legacy:
                shape = (pick(p.num, i), pick(p.channels, i), pick(p.height, i),
                         pick(p.width, i))
            else:
                shape = tuple(pick(p.shape, i).dim)
            try:
                t.reshape(shape)
            except ShapeError as exc:
                raise self.error("cannot shape top %d as %s: %s" % (i, shape, exc)) from None
        self._fill(top, constant=True)

    def _fill(self, top, constant):
        for i, t in enumerate(top):
            k = i if len(self.fillers) > 1 else 0
            if self.refill[k] != constant:
                try:
                    fill(t, self.fillers[k])
                except CaffeError as exc:
                    raise self.error("data_filler %d for top %d: %s" % (k, i, exc)) from None

    def reshape(self, bottom, top):
        pass  # data layers have no bottoms to follow; the tops keep their shapes

    def forward(self, bottom, top):
        self._fill(top, constant=False)
