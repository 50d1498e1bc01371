"""HDF5Data: batches of rows from the datasets of HDF5 files named in a list file."""

import logging
import os

import numpy as np

from ...data.datum import DataError
from ...errors import install_hint
from ...ranks import data_ranks
from ...registry import register_layer
from .base_data_layer import BaseDataLayer, layer_rng

log = logging.getLogger("pycaffe_lite")


def import_h5py(what):
    try:
        import h5py
    except ImportError:
        raise DataError("%s needs the optional h5py package: %s"
                        % (what, install_hint("hdf5", "h5py"))) from None
    return h5py


@register_layer("HDF5Data")
class HDF5DataLayer(BaseDataLayer):
    """Reads one dataset per top, named after the top, from HDF5 files (whole files are
    loaded into memory, one at a time, as in Caffe).

    Bottoms: none.
    Tops: one or more; top ``name`` is filled from dataset ``name`` of each file, shaped
    (batch_size, ...) with the dataset's trailing dimensions. All datasets of a file have the
    same number of rows; every file has the same trailing dimensions.
    Params: ``hdf5_data_param { source (a text file listing .h5 files, whitespace
    separated; relative names are tried from the working directory, then from the list
    file's folder), batch_size, shuffle (shuffle the files and the rows within each file at
    every pass) }``.

    In TRAIN, N data-parallel solvers read the same stream of rows and rank r keeps the rows
    r, r + N, r + 2N, ... (Caffe's ``HDF5DataLayer::Skip``); a batch covers N x batch_size
    rows, so the stored position is the same on every rank.
    """

    min_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.hdf5_data_param
        if not p.source:
            raise self.error("hdf5_data_param.source is empty: name the text file that lists "
                             "the HDF5 files")
        if p.batch_size <= 0:
            raise self.error("hdf5_data_param.batch_size must be positive (got %d)"
                             % p.batch_size)
        if self.layer_param.HasField("transform_param"):  # as Caffe's HDF5DataLayer checks
            raise self.error("HDF5Data does not transform data: remove transform_param and "
                             "store the values as the net should see them (scaled, mean "
                             "subtracted, cropped)")
        self.h5py = import_h5py("the HDF5Data layer")
        self.source = p.source
        self.batch_size = int(p.batch_size)
        self.shuffle = bool(p.shuffle)
        self.names = list(self.layer_param.top)
        if len(self.names) < len(top):
            raise self.error("HDF5Data tops must be named (each names its dataset)")
        self.rng = layer_rng()
        try:
            with open(self.source, "r", encoding="utf-8") as f:
                tokens = f.read().split()
        except FileNotFoundError:
            raise self.error("list file '%s' not found (hdf5_data_param.source lists the HDF5 "
                             "files)" % self.source) from None
        except OSError as exc:
            raise self.error("cannot read list file '%s': %s" % (self.source, exc)) from None
        if not tokens:
            raise self.error("list file '%s' names no HDF5 files (at least 1 is needed)"
                             % self.source)
        folder = os.path.dirname(os.path.abspath(self.source))
        self.files = [t if os.path.exists(t) or os.path.isabs(t) or
                      not os.path.exists(os.path.join(folder, t)) else os.path.join(folder, t)
                      for t in tokens]
        log.info("layer '%s': number of HDF5 files: %d", self.name, len(self.files))
        self.file_order = np.arange(len(self.files))
        if self.shuffle:
            self.file_order = self.rng.permutation(len(self.files))
        self.current_file = 0
        self.current_row = 0
        self.loaded = None
        self.trailing = None
        self._load(int(self.file_order[0]), shuffle_rows=True)
        for t, arr in zip(top, self.arrays):
            t.reshape((self.batch_size,) + arr.shape[1:])

    def source_records(self):
        """The rows of every listed file (read from the first dataset's shape)."""
        total = 0
        for path in self.files:
            with self.h5py.File(path, "r") as f:
                total += int(f[self.names[0]].shape[0])
        return total

    def _load(self, file_index, shuffle_rows):
        path = self.files[file_index]
        where = "HDF5 file '%s' (listed in '%s')" % (path, self.source)
        try:
            f = self.h5py.File(path, "r")
        except (OSError, ValueError) as exc:
            raise self.error("cannot open %s: %s" % (where, exc)) from None
        with f:
            arrays = []
            for name in self.names:
                if name not in f or not isinstance(f[name], self.h5py.Dataset):
                    present = ", ".join(sorted(k for k in f.keys())) or "none"
                    raise self.error("%s has no dataset '%s' (needed for top '%s'); datasets "
                                     "present: %s" % (where, name, name, present))
                ds = f[name]
                if ds.ndim < 1:
                    raise self.error("dataset '%s' of %s is a scalar; it needs at least one "
                                     "axis (rows)" % (name, where))
                if ds.dtype.kind not in "biuf":
                    raise self.error("dataset '%s' of %s holds %s values, not numbers"
                                     % (name, where, ds.dtype))
                arrays.append(np.asarray(ds[...], dtype=self.dtype))
        rows = arrays[0].shape[0]
        for name, arr in zip(self.names, arrays):
            if arr.shape[0] != rows:
                raise self.error("%s: dataset '%s' has %d rows but '%s' has %d; all datasets "
                                 "of a file must have the same number of rows"
                                 % (where, name, arr.shape[0], self.names[0], rows))
        if rows == 0:
            raise self.error("%s has no rows" % where)
        trailing = [arr.shape[1:] for arr in arrays]
        if self.trailing is not None and trailing != self.trailing:
            raise self.error("%s has datasets of row shapes %s but the first file's are %s"
                             % (where, trailing, self.trailing))
        self.trailing = trailing
        self.arrays = arrays
        self.loaded = file_index
        self.rows = rows
        self.row_order = np.arange(rows)
        if self.shuffle and shuffle_rows:
            self.row_order = self.rng.permutation(rows)
        log.debug("layer '%s': loaded %s (%d rows)", self.name, where, rows)

    def _end_of_file(self):
        """Caffe's Next() at the last row of a file."""
        if len(self.files) > 1:
            self.current_file += 1
            if self.current_file == len(self.files):
                self.current_file = 0
                if self.shuffle:
                    self.file_order = self.rng.permutation(len(self.files))
            self._load(int(self.file_order[self.current_file]), shuffle_rows=True)
        self.current_row = 0
        if self.shuffle:
            self.row_order = self.rng.permutation(self.rows)

    def forward(self, bottom, top):
        outs = []
        for t, arr in zip(top, self.arrays):
            t.reshape((self.batch_size,) + arr.shape[1:])
            outs.append(t.data)  # host: the rows come from host memory
        count, rank = data_ranks(self.phase)
        if count > 1:
            for i in range(self.batch_size):
                self._skip_rows(rank)
                row = self.row_order[self.current_row]
                for out, arr in zip(outs, self.arrays):
                    out[i] = arr[row]
                self._skip_rows(count - rank)  # this row, then the later ranks' rows
            return
        filled = 0
        while filled < self.batch_size:
            k = min(self.batch_size - filled, self.rows - self.current_row)
            rows = self.row_order[self.current_row:self.current_row + k]
            for out, arr in zip(outs, self.arrays):
                out[filled:filled + k] = arr[rows]
            filled += k
            self.current_row += k
            if self.current_row == self.rows:
                self._end_of_file()

    def _skip_rows(self, n):
        """Past ``n`` rows (across files, as Caffe's Next())."""
        for _ in range(n):
            self.current_row += 1
            if self.current_row == self.rows:
                self._end_of_file()

    def get_state(self):
        return {"type": self.type, "source": self.source, "file_order": self.file_order.copy(),
                "current_file": self.current_file, "row_order": self.row_order.copy(),
                "current_row": self.current_row, "rng": self.rng.bit_generator.state}

    def set_state(self, state):
        self._check_state(state)
        file_order = np.asarray(state["file_order"])
        if len(file_order) != len(self.files):
            raise self.error("the state is for %d HDF5 files, '%s' lists %d"
                             % (len(file_order), self.source, len(self.files)))
        self.file_order = file_order.copy()
        self.current_file = int(state["current_file"])
        index = int(self.file_order[self.current_file])
        if self.loaded != index:
            self._load(index, shuffle_rows=False)
        row_order = np.asarray(state["row_order"])
        if len(row_order) != self.rows:
            raise self.error("the state is for a file of %d rows, %s has %d"
                             % (len(row_order), self.files[index], self.rows))
        self.row_order = row_order.copy()
        self.current_row = int(state["current_row"])
        self.rng.bit_generator.state = state["rng"]
