"""MemoryData: batches from arrays held in memory, set from Python."""

import numpy as np

from ...data.datum import DataError, datum_to_array
from ...data.transformer import DataTransformer
from ...registry import register_layer
from .base_data_layer import BaseDataLayer, layer_rng


@register_layer("MemoryData")
class MemoryDataLayer(BaseDataLayer):
    """Serves consecutive batches of arrays given with :meth:`reset` (pycaffe's
    ``net.set_input_arrays(data, labels)``), wrapping around at the end.

    Bottoms: none.
    Tops: data (batch_size x channels x height x width) and label (batch_size,).
    Params: ``memory_data_param { batch_size, channels, height, width }`` (all positive).
    ``reset`` arrays are used as they are; :meth:`add_datum_vector` and
    :meth:`add_mat_vector` apply ``transform_param`` first. The number of items must be a
    multiple of batch_size.
    """

    exact_num_top_blobs = 2

    def setup(self, bottom, top):
        p = self.layer_param.memory_data_param
        self.batch_size = int(p.batch_size)
        self.shape = (int(p.channels), int(p.height), int(p.width))
        if self.batch_size <= 0 or min(self.shape) <= 0:
            raise self.error("batch_size, channels, height, and width must be specified and "
                             "positive in memory_data_param (got %d, %d, %d, %d)"
                             % ((self.batch_size,) + self.shape))
        self.transformer = DataTransformer(self.layer_param.transform_param, self.phase,
                                           "transform_param of layer '%s'" % self.name)
        self.rng = layer_rng()
        self.data = None
        self.labels = None
        self.pos = 0
        self.has_new_data = False
        top[0].reshape((self.batch_size,) + self.shape)
        top[1].reshape((self.batch_size,))

    def reset(self, data, labels):
        """Serve ``data`` (N x C x H x W) and ``labels`` (N, or N x 1 x 1 x 1) from the next
        forward on; N must be a multiple of batch_size. float32 C-contiguous arrays are used
        without a copy (later changes to them are seen, as in Caffe)."""
        data = np.ascontiguousarray(data, dtype=np.float32)
        labels = np.ascontiguousarray(labels, dtype=np.float32)
        if data.ndim != 4 or data.shape[1:] != self.shape:
            raise self.error("data array has shape %s; memory_data_param expects N x %d x %d x "
                             "%d" % ((data.shape,) + self.shape))
        n = data.shape[0]
        if labels.ndim not in (1, 4) or labels.shape[0] != n or labels.size != n:
            raise self.error("labels must hold one value per item (shape (%d,) or (%d, 1, 1, "
                             "1)), got shape %s" % (n, n, labels.shape))
        if n == 0 or n % self.batch_size:
            raise self.error("the number of items (%d) must be a positive multiple of "
                             "batch_size (%d)" % (n, self.batch_size))
        self.data = data
        self.labels = labels.reshape(n)
        self.pos = 0

    def set_batch_size(self, batch_size):
        if self.has_new_data:
            raise self.error("can't change batch_size until the added data has been consumed")
        if batch_size <= 0:
            raise self.error("batch_size must be positive, got %d" % batch_size)
        self.batch_size = int(batch_size)

    def _add(self, images, labels):
        if self.has_new_data:
            raise self.error("can't add data until the current data has been consumed")
        n = len(images)
        if n == 0:
            raise self.error("there is no data to add")
        if n % self.batch_size:
            raise self.error("the number of added items (%d) must be a multiple of batch_size "
                             "(%d)" % (n, self.batch_size))
        for i, im in enumerate(images):
            out = self.transformer.output_shape(im.shape, "item %d" % i)
            if out != self.shape:
                raise self.error("item %d becomes %s after transformation; memory_data_param "
                                 "expects %s" % (i, out, self.shape))
        data = np.empty((n,) + self.shape, np.float32)
        rng = np.random.default_rng(int(self.rng.integers(0, 2 ** 63)))
        self.transformer.transform(list(images), data, rng)
        self.reset(data, np.asarray(labels, np.float32))
        self.has_new_data = True

    def add_datum_vector(self, datums):
        """Transform a list of Datums (labels from the Datums) and serve them."""
        images = [datum_to_array(d, self.transformer.decode_color, "datum %d" % i)
                  for i, d in enumerate(datums)]
        self._add(images, [d.label for d in datums])

    def add_mat_vector(self, images, labels):
        """Transform a list of (H, W, C) BGR images (OpenCV's layout) and serve them."""
        if len(images) != len(labels):
            raise self.error("add_mat_vector: %d images but %d labels"
                             % (len(images), len(labels)))
        arrays = []
        for i, im in enumerate(images):
            im = np.asarray(im)
            if im.ndim == 2:
                im = im[:, :, np.newaxis]
            if im.ndim != 3:
                raise DataError("image %d has shape %s; expected H x W x C" % (i, im.shape))
            arrays.append(im.transpose(2, 0, 1))
        self._add(arrays, labels)

    def forward(self, bottom, top):
        if self.data is None:
            raise self.error("MemoryData needs data before forward: call "
                             "net.set_input_arrays(data, labels) (or the layer's reset())")
        bs = self.batch_size
        top[0].reshape((bs,) + self.shape)
        top[1].reshape((bs,))
        # host arrays: the data lives on the host (moved to the device when read there)
        top[0].data[...] = self.data[self.pos:self.pos + bs]
        top[1].data[...] = self.labels[self.pos:self.pos + bs]
        self.pos = (self.pos + bs) % len(self.data)
        if self.pos == 0:
            self.has_new_data = False

    def get_state(self):
        return {"type": self.type, "pos": self.pos, "rng": self.rng.bit_generator.state}

    def set_state(self, state):
        self._check_state(state)
        self.pos = int(state["pos"])
        self.rng.bit_generator.state = state["rng"]
