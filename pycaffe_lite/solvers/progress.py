"""A one-line progress bar (iterations, rate, ETA, loss) for training on a terminal.

Only shown when the stream is a TTY. Log records erase the bar before they are written (a filter
on the logging handlers), and the next update draws it again below them, so the log text stays
exactly Caffe's.
"""

import logging
import sys
import time


def _fmt_time(seconds):
    seconds = int(max(seconds, 0))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return "%d:%02d:%02d" % (h, m, s) if h else "%d:%02d" % (m, s)


class _EraseFilter(logging.Filter):
    def __init__(self, bar):
        super().__init__()
        self.bar = bar

    def filter(self, record):
        self.bar.erase()
        return True


class ProgressBar:
    def __init__(self, total, stream=None, width=28, min_interval=0.1):
        self.total = int(total)
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.min_interval = min_interval
        self._shown = False
        self._last_draw = 0.0
        self._t0 = None
        self._it0 = 0
        self._filter = _EraseFilter(self)
        self._handlers = []

    @staticmethod
    def wanted(stream=None):
        stream = stream if stream is not None else sys.stderr
        isatty = getattr(stream, "isatty", None)
        return bool(isatty and isatty())

    def attach(self):
        for handler in logging.getLogger().handlers + logging.getLogger("pycaffe_lite").handlers:
            if handler not in self._handlers:
                handler.addFilter(self._filter)
                self._handlers.append(handler)
        return self

    def start(self, it):
        self._t0 = time.perf_counter()
        self._it0 = it

    def line(self, it, loss=None, now=None):
        now = time.perf_counter() if now is None else now
        if self._t0 is None:
            self.start(it)
        done = it - self._it0
        elapsed = now - self._t0
        rate = done / elapsed if elapsed > 0 else 0.0
        total = max(self.total, 1)
        frac = min(max(it / total, 0.0), 1.0)
        filled = int(round(frac * self.width))
        bar = "#" * filled + "-" * (self.width - filled)
        eta = (self.total - it) / rate if rate > 0 else 0.0
        text = "[%s] %d/%d %5.1f%% %.2f it/s ETA %s" % (bar, it, self.total, 100 * frac, rate,
                                                        _fmt_time(eta))
        if loss is not None:
            text += " loss %.4g" % loss
        return text

    def update(self, it, loss=None, force=False):
        now = time.perf_counter()
        if not force and self._shown and now - self._last_draw < self.min_interval:
            return
        self._last_draw = now
        self.stream.write("\r\x1b[K" + self.line(it, loss, now))
        self.stream.flush()
        self._shown = True

    def erase(self):
        if self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False

    def close(self):
        self.erase()
        for handler in self._handlers:
            handler.removeFilter(self._filter)
        self._handlers = []
