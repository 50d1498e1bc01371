"""Progress lines for long conversions: count, rate and (when the total is known) ETA."""

import logging
import time

log = logging.getLogger("pycaffe_lite")


def format_duration(seconds):
    seconds = max(0, int(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return "%d:%02d:%02d" % (h, m, s)


class Progress:
    """Report ``what`` processed every ``every`` items and at the end.

    ``update(n)`` adds ``n`` items; ``done()`` reports the final count. Lines read like
    ``Processed 3000 of 10000 images (2512.3/s, ETA 0:00:02)``. ``sink`` (default: the
    ``pycaffe_lite`` logger at INFO) receives each line; ``clock`` is for tests.
    """

    def __init__(self, total=None, what="items", every=1000, sink=None, clock=time.monotonic):
        self.total = total
        self.what = what
        self.every = max(1, int(every))
        self.sink = sink if sink is not None else log.info
        self.clock = clock
        self.count = 0
        self.start = clock()
        self._next_report = self.every
        self.lines = 0

    def line(self):
        elapsed = self.clock() - self.start
        rate = self.count / elapsed if elapsed > 0 else float("inf")
        if self.total:
            text = "Processed %d of %d %s" % (self.count, self.total, self.what)
        else:
            text = "Processed %d %s" % (self.count, self.what)
        if rate != float("inf"):
            text += " (%.1f/s" % rate
            if self.total and rate > 0:
                text += ", ETA %s" % format_duration((self.total - self.count) / rate)
            text += ")"
        return text

    def update(self, n=1):
        self.count += n
        if self.count >= self._next_report:
            self.sink(self.line())
            self.lines += 1
            self._next_report = (self.count // self.every + 1) * self.every

    def done(self):
        elapsed = self.clock() - self.start
        text = "Processed %d %s in %s" % (self.count, self.what, format_duration(elapsed))
        if elapsed > 0:
            text += " (%.1f/s)" % (self.count / elapsed)
        self.sink(text)
        self.lines += 1
        return text
