"""Blob: an N-D array of values (``data``) and their gradients (``diff``)."""

import numpy as np

from . import frozen
from .errors import ShapeError
from .proto import caffe_pb2
from .proto.wire import encode_varint
from .syncedmem import SyncedArray

MAX_BLOB_AXES = 32


class Blob:
    """Caffe's Blob: shape, data and diff, each with a host and (in GPU mode) a device copy.

    Two faces reach the arrays (the Layer contract in :mod:`pycaffe_lite.layer` says which a
    layer uses):

    - the current mode's arrays (NumPy on the CPU, CuPy on the GPU): ``read_data()`` /
      ``read_diff()`` to read, ``write_data()`` / ``write_diff()`` to write. Device-generic
      layers, solvers and the Net use these; they never copy between host and device unless
      the other side holds the newer values.
    - the host arrays: ``cpu_data()`` / ``cpu_diff()`` to read (the device copy stays
      current), ``data`` / ``diff`` to write or read-modify-write (the device copy becomes
      stale). pycaffe scripts, Python layers and layers declaring ``host_only`` use these.

    Every view is the blob's current shape over storage that a smaller reshape reuses; do not
    keep one across a reshape.
    """

    #: ``hook(blob)``, called before the first write into :attr:`data` while its host array
    #: is read-only because another object computes with values derived from it (a folded
    #: net: the hook unfolds it); None otherwise
    on_write = None

    def __init__(self, shape=(), dtype=np.float32):
        self.dtype = np.dtype(dtype)
        self._shape = ()
        self._count = 0
        self._capacity = 0
        self._data = None
        self._diff = None
        self.reshape(shape)

    # ---- shape ---------------------------------------------------------------------------
    def reshape(self, *shape):
        """Change the shape; storage is reused when the new count fits the capacity."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = shape[0]
        if isinstance(shape, caffe_pb2.BlobShape):
            shape = tuple(shape.dim)
        shape = tuple(int(d) for d in shape)
        if len(shape) > MAX_BLOB_AXES:
            raise ShapeError("a blob has at most %d axes, got shape %s" % (MAX_BLOB_AXES, shape))
        for d in shape:
            if d < 0:
                raise ShapeError("blob dimensions must be >= 0, got shape %s" % (shape,))
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if count > np.iinfo(np.int32).max:
            raise ShapeError("blob of shape %s has more than 2^31 elements" % (shape,))
        self._shape = shape
        self._count = count
        if self._data is None or count > self._capacity:
            self._capacity = count
            self._data = SyncedArray(count, self.dtype)
            self._diff = SyncedArray(count, self.dtype)

    def reshape_like(self, other):
        """Take ``other``'s shape (Caffe's ReshapeLike)."""
        self.reshape(other.shape)

    @property
    def shape(self):
        """The shape, a tuple of ints."""
        return self._shape

    @property
    def num_axes(self):
        """The number of axes (``len(shape)``)."""
        return len(self._shape)

    @property
    def count(self):
        """Number of elements (pycaffe's ``blob.count``)."""
        return self._count

    def count_range(self, start, end=None):
        """Product of the dimensions ``start`` (inclusive) to ``end`` (exclusive)."""
        end = self.num_axes if end is None else end
        return int(np.prod(self._shape[start:end], dtype=np.int64))

    def canonical_axis_index(self, axis):
        """``axis`` in 0 .. num_axes - 1 (negative counts from the end); a ShapeError when out
        of range."""
        n = self.num_axes
        if not -n <= axis < n:
            raise ShapeError("axis %d out of range for a %d-axis blob of shape %s"
                             % (axis, n, self._shape))
        return axis + n if axis < 0 else axis

    def shape_at(self, axis):
        """The size of ``axis`` (negative counts from the end)."""
        return self._shape[self.canonical_axis_index(axis)]

    def legacy_shape(self, index):
        """Caffe's LegacyShape: axes beyond a <=4-axis shape count as 1."""
        if self.num_axes > 4:
            raise ShapeError("legacy accessors need a blob of at most 4 axes, shape is %s"
                             % (self._shape,))
        if index >= self.num_axes or index < -self.num_axes:
            return 1
        return self.shape_at(index)

    num = property(lambda self: self.legacy_shape(0), doc="Legacy axis 0 (pycaffe's num).")
    channels = property(lambda self: self.legacy_shape(1), doc="Legacy axis 1 (channels).")
    height = property(lambda self: self.legacy_shape(2), doc="Legacy axis 2 (height).")
    width = property(lambda self: self.legacy_shape(3), doc="Legacy axis 3 (width).")

    # ---- storage -------------------------------------------------------------------------
    def _view(self, arr):
        return arr[: self._count].reshape(self._shape)

    @property
    def data(self):
        """The host data (NumPy), current and writable in place: the device copy becomes
        stale (Caffe's mutable_cpu_data). pycaffe's ``blob.data``; layers use it only when
        they declare ``host_only``. ``blob.data = values`` copies into it. While another
        object holds values derived from it (:attr:`on_write`), it is a read-only
        :class:`~pycaffe_lite.frozen.FrozenArray` whose first write calls that hook."""
        view = self._view(self._data.mutable_cpu())
        return view if self.on_write is None else frozen.guarded(view, self)

    @data.setter
    def data(self, value):
        self.data[...] = value

    @property
    def diff(self):
        """The host diff (NumPy), current and writable in place: the device copy becomes
        stale (Caffe's mutable_cpu_diff). ``blob.diff = values`` copies into it."""
        return self._view(self._diff.mutable_cpu())

    @diff.setter
    def diff(self, value):
        self.diff[...] = value

    def cpu_data(self):
        """The host data (NumPy) for reading: brought up to date from the device if needed,
        and the device copy stays current (Caffe's cpu_data). Do not write into it."""
        return self._view(self._data.cpu())

    def cpu_diff(self):
        """The host diff (NumPy) for reading, as :meth:`cpu_data`. Do not write into it."""
        return self._view(self._diff.cpu())

    def read_data(self):
        """The data in the current mode's array (NumPy on the CPU, CuPy on the GPU) for
        reading; the other copy stays current. Do not write into it."""
        return self._view(self._data.read())

    def write_data(self):
        """The data in the current mode's array for writing (or read-modify-write): the other
        copy becomes stale."""
        return self._view(self._data.write())

    def read_diff(self):
        """The diff in the current mode's array for reading, as :meth:`read_data`."""
        return self._view(self._diff.read())

    def write_diff(self):
        """The diff in the current mode's array for writing, as :meth:`write_data`."""
        return self._view(self._diff.write())

    def device_written(self):
        """The device data was written outside the layers (a CUDA graph's replay, see
        :mod:`pycaffe_lite.cuda_graphs`): reading the host data copies it down again."""
        if self._data is not None:
            self._data.device_written()

    def pin_host(self):
        """Put the data's host side in page-locked memory (GPU-mode data loading)."""
        self._data.pin_host()

    @property
    def synced_data(self):
        """The data's SyncedArray (host/device storage and sync state)."""
        return self._data

    @property
    def synced_diff(self):
        """The diff's storage (a SyncedArray, or a training net's shared slot)."""
        return self._diff

    def set_diff_storage(self, storage):
        """Keep the diff in ``storage`` (SyncedArray's interface, at least ``count``
        elements), which other blobs may use too: how a training net lets diffs that are never
        needed at the same time share one buffer (:mod:`pycaffe_lite.net_memory`)."""
        if storage.size < self._count:
            raise ShapeError("diff storage of %d elements for a blob of shape %s"
                             % (storage.size, self._shape))
        self._diff = storage
        self._capacity = min(self._data.size, storage.size)

    @property
    def data_state(self):
        """Where the newest data lives (the SyncedArray's head: host, device or both)."""
        return self._data.head

    @property
    def diff_state(self):
        """Where the newest diff lives, as :attr:`data_state`."""
        return self._diff.head

    def share_data(self, other):
        """Use ``other``'s data storage (counts must match)."""
        if self._count != other._count:
            raise ShapeError("cannot share data of a blob of shape %s with one of shape %s"
                             % (other.shape, self.shape))
        self._data = other._data
        self._capacity = min(self._data.size, self._diff.size)

    def copy_data(self, other):
        """Copy ``other``'s data (same count) into this blob's storage, in the current mode's
        arrays (device to device in GPU mode)."""
        self.write_data()[...] = other.read_data().reshape(self._shape)

    def shares_data_with(self, other):
        """Whether this blob uses ``other``'s data storage, with the same shape."""
        return self._data is other._data and self._shape == other._shape

    def share_diff(self, other):
        """Use ``other``'s diff storage (counts must match)."""
        if self._count != other._count:
            raise ShapeError("cannot share diff of a blob of shape %s with one of shape %s"
                             % (other.shape, self.shape))
        self._diff = other._diff
        self._capacity = min(self._data.size, self._diff.size)

    # ---- math ----------------------------------------------------------------------------
    def update(self):
        """data -= diff, on the side where the data currently is."""
        data = self.write_data()
        data -= self.read_diff()

    def asum_data(self):
        """The sum of the data's absolute values (L1 norm), a float."""
        return float(abs(self.read_data()).sum())

    def asum_diff(self):
        """The sum of the diff's absolute values, a float."""
        return float(abs(self.read_diff()).sum())

    def sumsq_data(self):
        """The sum of the data's squares, a float."""
        d = self.read_data().ravel()
        return float(d.dot(d))

    def sumsq_diff(self):
        """The sum of the diff's squares, a float."""
        d = self.read_diff().ravel()
        return float(d.dot(d))

    def scale_data(self, factor):
        """data *= factor, where the data is."""
        d = self.write_data()
        d *= factor

    def scale_diff(self, factor):
        """diff *= factor, where the diff is."""
        d = self.write_diff()
        d *= factor

    # ---- proto ---------------------------------------------------------------------------
    def shape_equals(self, proto):
        """Caffe's ShapeEquals: legacy 4-D protos match shapes of <= 4 axes padded with 1s."""
        if proto.HasField("num") or proto.HasField("channels") or \
                proto.HasField("height") or proto.HasField("width"):
            return (self.num_axes <= 4 and
                    self.legacy_shape(-4) == proto.num and
                    self.legacy_shape(-3) == proto.channels and
                    self.legacy_shape(-2) == proto.height and
                    self.legacy_shape(-1) == proto.width)
        return tuple(proto.shape.dim) == self._shape

    def to_proto(self, proto=None, write_diff=False):
        """The blob as a BlobProto (into ``proto`` if given): its shape, its data (and diff
        with ``write_diff``), in double fields for a float64 blob."""
        proto = caffe_pb2.BlobProto() if proto is None else proto
        proto.Clear()
        if self._shape:  # as Blob::ToProto: a blob of no axes writes no shape message
            proto.shape.dim.extend(self._shape)
        double = self.dtype == np.float64
        fields = [(8 if double else 5, self.cpu_data())]
        if write_diff:
            fields.append((9 if double else 6, self.cpu_diff()))
        for number, values in fields:
            proto.MergeFromString(_packed(number, values, np.float64 if double else np.float32))
        return proto

    def from_proto(self, proto, reshape=True):
        """Load a BlobProto's values (reshaping to its shape, or requiring an equal shape with
        ``reshape=False``); a ShapeError when the counts disagree. Returns the blob."""
        if reshape:
            self.reshape(proto_shape(proto))
        elif not self.shape_equals(proto):
            raise ShapeError("blob proto of shape %s does not match blob of shape %s"
                             % (proto_shape(proto), self._shape))
        self._fill_from(proto_values(proto), "data", self.data)
        diff = proto_values(proto, diff=True)
        if len(diff):
            self._fill_from(diff, "diff", self.diff)
        return self

    def _fill_from(self, values, what, target):
        if len(values) != self._count:
            raise ShapeError("blob proto holds %d %s values for a blob of shape %s (%d)"
                             % (len(values), what, self._shape, self._count))
        target[...] = np.asarray(values, dtype=self.dtype).reshape(self._shape)

    def __repr__(self):
        return "Blob(shape=%s, dtype=%s)" % (self._shape, self.dtype.name)


def _packed(field_number, values, dtype):
    """The wire bytes of a packed repeated float/double field: far faster than extending the
    repeated field element by element for large blobs."""
    payload = np.ascontiguousarray(values, dtype=np.dtype(dtype).newbyteorder("<")).tobytes()
    return encode_varint(field_number << 3 | 2) + encode_varint(len(payload)) + payload


# NVCaffe's Type enum -> the little-endian NumPy type of its raw_data / raw_diff bytes
_RAW_TYPES = {0: "<f8", 1: "<f4", 2: "<f2", 3: "<i4", 4: "<u4"}


def proto_values(proto, diff=False):
    """The values a BlobProto holds (its diff with ``diff``), flat: the float or double field,
    or NVCaffe's raw bytes (``raw_data`` of ``raw_data_type``: FLOAT16 weights and the rest),
    float64 for doubles, float32 otherwise."""
    doubles, floats = (proto.double_diff, proto.diff) if diff else (proto.double_data, proto.data)
    if len(doubles):
        return np.asarray(doubles, dtype=np.float64)
    raw, raw_type = ("raw_diff", "raw_diff_type") if diff else ("raw_data", "raw_data_type")
    if not len(floats) and proto.HasField(raw):
        code = getattr(proto, raw_type)
        if not proto.HasField(raw_type) or code not in _RAW_TYPES:
            raise ShapeError("blob proto holds %s of %s type %s, which has no numeric reading"
                             % (raw, "no" if not proto.HasField(raw_type) else "the",
                                caffe_pb2.Type.Name(code) if proto.HasField(raw_type) else ""))
        dtype = np.dtype(_RAW_TYPES[code])
        data = getattr(proto, raw)
        if len(data) % dtype.itemsize:
            raise ShapeError("blob proto's %s has %d bytes, not a whole number of %s values"
                             % (raw, len(data), caffe_pb2.Type.Name(code)))
        values = np.frombuffer(data, dtype=dtype)
        return values.astype(np.float64 if code == 0 else np.float32)
    return np.asarray(floats, dtype=np.float32)


def proto_shape(proto):
    """The shape a BlobProto describes (legacy num/channels/height/width or ``shape``)."""
    if proto.HasField("num") or proto.HasField("channels") or \
            proto.HasField("height") or proto.HasField("width"):
        return (proto.num, proto.channels, proto.height, proto.width)
    return tuple(proto.shape.dim)


def fill_blobproto(proto, arr, diff=None):
    """Set ``proto`` (a BlobProto) to ``arr``'s N-D shape and float32 values (and ``diff``)."""
    arr = np.asarray(arr)
    proto.Clear()
    proto.shape.dim.extend(arr.shape)
    proto.MergeFromString(_packed(5, arr, np.float32))
    if diff is not None:
        proto.MergeFromString(_packed(6, np.asarray(diff), np.float32))
    return proto


def array_to_blobproto(arr, diff=None):
    """A new BlobProto holding ``arr`` (float32 values, N-D shape)."""
    return fill_blobproto(caffe_pb2.BlobProto(), arr, diff)


def blobproto_to_array(proto, return_diff=False):
    """The array a BlobProto holds (its diff with ``return_diff``)."""
    shape = proto_shape(proto)
    values = proto_values(proto, diff=return_diff)
    count = int(np.prod(shape, dtype=np.int64)) if len(shape) else 1
    if len(values) != count:
        raise ShapeError("blob proto holds %d %s values for its shape %s (%d values)"
                         % (len(values), "diff" if return_diff else "data", tuple(shape), count))
    return values.reshape(shape)

