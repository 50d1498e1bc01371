"""Reading Darknet's ``.weights`` files.

Layout (little-endian): three int32, ``major``, ``minor`` and ``revision``; then ``seen`` (the
number of training images seen), 64 bits wide when ``major * 10 + minor >= 2`` and both major
and minor are below 1000, else 32 bits (pjreddie's rule; files written by Darknet today have
0.2.0 and a 64-bit count). Then float32 parameters, layer after layer in ``.cfg`` order, with
no separators or sizes: the reader must know each layer's counts from the ``.cfg``:

- ``[convolutional]``: biases (filters), then if ``batch_normalize`` scales, rolling mean and
  rolling variance (filters each), then the weights (filters x channels/groups x size x size);
- ``[connected]``: biases (outputs), the weights (outputs x inputs, row-major, or inputs x
  outputs when major or minor is above 1000), then if ``batch_normalize`` scales, rolling mean
  and rolling variance;
- ``[batchnorm]``: scales, rolling mean and rolling variance (channels each) in pjreddie's
  Darknet; AlexeyAB's fork writes biases before them (4 arrays).

A file shorter or longer than the ``.cfg`` asks for is an error naming the layer.
"""

import numpy as np

from .cfg import DarknetError, read_file

_HEADER = np.dtype("<i4")
_FLOAT = np.dtype("<f4")


class DarknetWeights:
    """The header of a ``.weights`` file and its parameters, read in order with :meth:`take`.

    ``major``, ``minor``, ``revision``, ``seen``; ``transpose`` is Darknet's flag for
    ``[connected]`` weights stored transposed (major or minor above 1000); ``seen_bytes`` is
    4 or 8; ``offset`` is the byte position of the next parameter; ``hint`` is added to the
    errors for a file that does not match the ``.cfg``.
    """

    def __init__(self, data, path="<bytes>"):
        self.path = path
        self.data = data
        need = 3 * 4
        if len(data) < need:
            raise DarknetError("%d bytes: too short for Darknet's header (major, minor and "
                               "revision, then the seen count: 16 or 20 bytes)" % len(data),
                               path)
        self.major, self.minor, self.revision = (int(v) for v in
                                                 np.frombuffer(data, _HEADER, 3, 0))
        wide = (self.major * 10 + self.minor) >= 2 and self.major < 1000 and self.minor < 1000
        self.seen_bytes = 8 if wide else 4
        if len(data) < need + self.seen_bytes:
            raise DarknetError("%d bytes: too short for Darknet's header (version %d.%d.%d "
                               "needs a %d-bit seen count, %d bytes in all)"
                               % (len(data), self.major, self.minor, self.revision,
                                  8 * self.seen_bytes, need + self.seen_bytes), path)
        self.seen = int(np.frombuffer(data, "<u8" if wide else "<u4", 1, need)[0])
        self.transpose = self.major > 1000 or self.minor > 1000
        self.offset = need + self.seen_bytes
        self.header_bytes = self.offset
        self.last = None  # description of the last layer read from
        self.hint = ""

    @property
    def version(self):
        return "%d.%d.%d" % (self.major, self.minor, self.revision)

    @property
    def remaining(self):
        return len(self.data) - self.offset

    def take(self, count, what, layer):
        """The next ``count`` values as a float32 array (a copy), for ``what`` (e.g.
        ``"biases"``) of ``layer`` (a description such as ``"layer 3 [convolutional] at
        yolo.cfg:27"``)."""
        nbytes = 4 * count
        if self.remaining < nbytes:
            raise DarknetError(
                "the file ends early: %s needs %d values (%d bytes) for its %s at byte %d, but "
                "only %d bytes remain; the .weights file does not match the .cfg (fewer or "
                "smaller layers, or a truncated download)%s"
                % (layer, count, nbytes, what, self.offset, self.remaining, self.hint),
                self.path)
        values = np.frombuffer(self.data, _FLOAT, count, self.offset).astype(np.float32)
        self.offset += nbytes
        self.last = layer
        return values

    def finish(self):
        """Check that every byte was read."""
        left = self.remaining
        if left:
            after = ("after the last layer with parameters, %s" % self.last) if self.last \
                else "after the header, but the .cfg has no layer with parameters"
            raise DarknetError(
                "%d bytes (%s) are left over %s; the .weights file does not match the .cfg "
                "(more or larger layers in the file)%s"
                % (left, "%d values" % (left // 4) if left % 4 == 0 else "not a whole number "
                   "of float32 values", after, self.hint), self.path)

    def __repr__(self):
        return "<DarknetWeights %s: version %s, seen %d, %d bytes of parameters>" % (
            self.path, self.version, self.seen, len(self.data) - self.header_bytes)


def read_weights(path):
    """A :class:`DarknetWeights` over the bytes of a ``.weights`` file."""
    path, data = read_file(path)
    return DarknetWeights(data, path)
