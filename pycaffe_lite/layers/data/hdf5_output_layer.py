"""HDF5Output: writes its two bottoms to an HDF5 file."""

import numpy as np

from ...registry import register_layer
from .base_data_layer import BaseDataLayer
from .hdf5_data_layer import import_h5py


@register_layer("HDF5Output")
class HDF5OutputLayer(BaseDataLayer):
    """Saves bottom 0 as dataset ``data`` and bottom 1 as dataset ``label`` of ``file_name``.

    Bottoms: data and label (same first dimension; any shape of at most 4 axes, stored as
    Caffe does with 4 axes: N x C x H x W, missing axes 1).
    Tops: none.
    Params: ``hdf5_output_param { file_name }``. The file is created (truncated) at setup.
    Each forward appends its batch to the datasets (Caffe's layer can only write one batch;
    the first batch is stored the same way) and flushes, so the file is readable at any time;
    ``close()`` closes it.
    """

    exact_num_bottom_blobs = 2
    exact_num_top_blobs = 0

    def setup(self, bottom, top):
        self.file_name = self.layer_param.hdf5_output_param.file_name
        if not self.file_name:
            raise self.error("hdf5_output_param.file_name is empty: name the file to write")
        h5py = import_h5py("the HDF5Output layer")
        try:
            self.file = h5py.File(self.file_name, "w")
        except (OSError, ValueError) as exc:
            raise self.error("cannot create HDF5 file '%s': %s" % (self.file_name, exc)) \
                from None
        self.resources.push(self.file.close)

    @staticmethod
    def _legacy(shape):
        if len(shape) > 4:
            return tuple(shape)
        return tuple(shape) + (1,) * (4 - len(shape))

    def forward(self, bottom, top):
        if self.closed:
            raise self.error("the HDF5 output file '%s' was closed" % self.file_name)
        if bottom[0].shape[:1] != bottom[1].shape[:1]:
            raise self.error("data and label must have the same first dimension, got %s and %s"
                             % (bottom[0].shape, bottom[1].shape))
        for name, blob in (("data", bottom[0]), ("label", bottom[1])):
            arr = np.asarray(blob.cpu_data(), np.float32).reshape(self._legacy(blob.shape))
            if name not in self.file:
                self.file.create_dataset(name, data=arr, maxshape=(None,) + arr.shape[1:],
                                         chunks=True)
                continue
            ds = self.file[name]
            if ds.shape[1:] != arr.shape[1:]:
                raise self.error("bottom '%s' has shape %s but earlier batches written to "
                                 "'%s' had %s" % (name, blob.shape, self.file_name,
                                                  ds.shape[1:]))
            n = ds.shape[0]
            ds.resize(n + arr.shape[0], axis=0)
            ds[n:] = arr
        self.file.flush()
