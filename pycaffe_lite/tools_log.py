"""Training logs: Caffe's (glog) line format, parsing into CSV rows, and plotting.

- :class:`GlogFormatter` writes records as glog does
  (``I0212 10:37:36.386013 12345 solver.py:298] Iteration 100, loss = 0.28``), so Caffe's own
  ``tools/extra/parse_log.py`` reads our logs; the training commands switch to it.
- :func:`parse_log` reads a Caffe or pycaffe-lite training log into train and test rows with
  Caffe's CSV columns (``NumIters, Seconds, LearningRate`` and one column per net output);
  :func:`save_csv_files` writes ``<log name>.train`` and ``<log name>.test`` as Caffe's
  ``parse_log.py`` does. ``tools/parse_log.py`` is the command line.
- :func:`plot_log` draws loss and accuracy against iterations into a PNG, and
  :func:`plot_chart` one of Caffe's eight chart types (:data:`CHART_TYPES`) for one or more
  logs (both need matplotlib, an optional extra). ``tools/plot_training_log.py`` is the
  command line.
"""

import csv
import datetime
import logging
import math
import os
import re
import time

from .errors import CaffeError


# ---- glog line format -----------------------------------------------------------------------
class GlogFormatter(logging.Formatter):
    """``<L><mmdd> <hh:mm:ss.uuuuuu> <pid> <file>:<line>] <message>``."""

    def format(self, record):
        t = time.localtime(record.created)
        usec = int((record.created - int(record.created)) * 1e6)
        prefix = "%s%02d%02d %02d:%02d:%02d.%06d %5d %s:%d] " % (
            record.levelname[:1], t.tm_mon, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, usec,
            record.process or 0, record.filename, record.lineno)
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return prefix + text


def use_glog_format(logger=None):
    """Give the handlers of the root logger (and ``pycaffe_lite``'s) the glog format."""
    loggers = [logging.getLogger(), logging.getLogger("pycaffe_lite")]
    if logger is not None:
        loggers.append(logger)
    formatter = GlogFormatter()
    for lg in loggers:
        for handler in lg.handlers:
            # plain console and file handlers only (not, e.g., a test runner's capture)
            if type(handler) in (logging.StreamHandler, logging.FileHandler):
                handler.setFormatter(formatter)


# ---- parsing ----------------------------------------------------------------------------
_ITERATION = re.compile(r"Iteration (\d+)")
_TRAIN_OUTPUT = re.compile(r"Train net output #(\d+): (\S+) = (\S+)")
_TEST_OUTPUT = re.compile(r"Test net output #(\d+): (\S+) = (\S+)")
# a number as C++ streams print it: glog writes a diverged value as nan, -nan, inf or -inf
# (MSVC as nan(ind), -nan(ind))
_NUMBER = r"[-+]?(?:nan(?:\(\w*\))?|inf(?:inity)?|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_NUMBER_ONLY = re.compile(_NUMBER + r"\Z", re.I)
_LEARNING_RATE = re.compile(r"lr = (%s)" % _NUMBER, re.I)
# the solver's display line; newer Caffe puts "(2.5 iter/s, 4.1s/100 iters)" before the comma
_SMOOTHED_LOSS = re.compile(r"Iteration \d+(?: \([^)]*\))?, loss = (%s)" % _NUMBER, re.I)
_TIMESTAMP = re.compile(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?")


class _Clock:
    """The datetimes of a log's lines. A glog stamp (or pycaffe-lite's ``I1122 00:13:01``) has
    no year: the first stamp is in ``year``, and a later one is in the next year only when it
    is more than half a year before the previous stamp (December 31 to January 1; Caffe's
    extract_seconds decides a new year when the month goes back). A stamp a little before the
    previous one (lines of several processes written out of order, the hour repeated when
    daylight saving time ends) stays in its year: a small step back, not a year forward; a
    stamp more than half a year after the previous one is a late line of the year before."""

    HALF_YEAR = datetime.timedelta(days=183)

    def __init__(self, year):
        self.year = year
        self.previous = None

    def stamp(self, line):
        """The datetime of ``line``, or None for a line without a stamp."""
        m = _TIMESTAMP.match(line.strip())
        if not m:
            return None
        fields = [int(g) for g in m.groups()[:5]]
        fields.append(int((m.group(6) or "0").ljust(6, "0")[:6]))
        year = self.year
        try:
            if self.previous is not None:
                # month and day compared in a leap year, where every stamp is a date
                step = datetime.datetime(2000, *fields) - self.previous.replace(year=2000)
                year = self.previous.year + ((step < -self.HALF_YEAR) - (step > self.HALF_YEAR))
            when = datetime.datetime(year, *fields)
        except ValueError:  # not a date (or February 29 of a common year)
            return None
        self.previous = when
        return when


def _first_year(path, f):
    """The year of the log's first line: the file was last written in its last line's year,
    and every year the log crosses moves its start one year back."""
    try:
        end_year = datetime.datetime.fromtimestamp(os.path.getmtime(path)).year
    except OSError:
        end_year = datetime.datetime.now().year
    if not f.seekable():  # a pipe: read once
        return end_year
    clock = _Clock(end_year)
    for line in f:
        clock.stamp(line)
    f.seek(0)
    crossed = clock.previous.year - end_year if clock.previous is not None else 0
    return end_year - crossed


def parse_log(path):
    """(train_rows, test_rows) of a training log: lists of dicts with the keys
    ``NumIters, Seconds, LearningRate`` and then one key per net output, in log order."""
    return _read_log(path)[:2]


def _read_log(path):
    """parse_log's rows, then the solver's ``Iteration N, loss = x`` and ``Iteration N, lr =
    x`` lines as lists of (iteration, seconds, value)."""
    train_rows, test_rows = [], []
    losses, rates = [], []
    train_row = test_row = None
    iteration = -1
    learning_rate = float("nan")
    start = None
    try:
        f = open(path, errors="replace")
    except OSError as exc:
        raise CaffeError("cannot read log file %s: %s" % (path, exc.strerror or exc)) from None
    with f:
        clock = _Clock(_first_year(path, f))
        for number, line in enumerate(f, 1):
            stamp = clock.stamp(line)
            if stamp is not None:
                if start is None or (("Solving" in line) and iteration == -1):
                    start = stamp
            solver_line = _ITERATION.search(line)
            if solver_line:
                iteration = int(solver_line.group(1))
            if iteration == -1:
                continue
            seconds = (stamp - start).total_seconds() if stamp is not None and start else 0.0
            m = _LEARNING_RATE.search(line)
            if m:
                learning_rate = _number(m.group(1))
                if solver_line:
                    rates.append((iteration, seconds, learning_rate))
            m = _SMOOTHED_LOSS.search(line)
            if m:
                losses.append((iteration, seconds, _number(m.group(1))))
            where = (path, number)
            train_rows, train_row = _net_output(_TRAIN_OUTPUT, train_row, train_rows, line,
                                                iteration, seconds, learning_rate, where)
            test_rows, test_row = _net_output(_TEST_OUTPUT, test_row, test_rows, line,
                                              iteration, seconds, learning_rate, where)
    for rows, row in ((train_rows, train_row), (test_rows, test_row)):
        if row and (not rows or len(row) == len(rows[0])) and row not in rows:
            rows.append(row)
    _fix_initial_learning_rate(train_rows)
    _fix_initial_learning_rate(test_rows)
    return train_rows, test_rows, losses, rates


def _number(text, where=None, what="the value"):
    """The value of a number as a log prints it (``-nan`` is NaN); a CaffeError naming the
    file and line (``where``) for anything else."""
    if not _NUMBER_ONLY.match(text):
        raise CaffeError("%s:%d: %s %r is not a number" % (where + (what, text)))
    if "nan" in text.lower():
        return float("nan")
    return float(text)


def _net_output(regex, row, rows, line, iteration, seconds, learning_rate, where):
    m = regex.search(line)
    if m:
        if not row or row["NumIters"] != iteration:
            if row:
                rows.append(row)
            row = {"NumIters": iteration, "Seconds": seconds, "LearningRate": learning_rate}
        row[m.group(2)] = _number(m.group(3), where, "net output '%s' =" % m.group(2))
    if row and rows and len(row) == len(rows[0]):
        rows.append(row)
        row = None
    return rows, row


def _fix_initial_learning_rate(rows):
    """The lr is logged after the first display and test: take it from the second row."""
    if len(rows) > 1 and math.isnan(rows[0]["LearningRate"]):
        rows[0]["LearningRate"] = rows[1]["LearningRate"]


def write_csv(path, rows, delimiter=","):
    """``rows`` as a CSV file with a header; no rows write no file (as Caffe's parse_log.py:
    an empty file is no table). Returns whether the file was written."""
    if not rows:
        return False
    fields = []
    for row in rows:
        for key in row:
            if key not in fields:
                fields.append(key)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, delimiter=delimiter, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return True


def save_csv_files(log_path, output_dir, train_rows, test_rows, delimiter=",", verbose=False):
    """``<output_dir>/<log basename>.train`` and ``.test`` (Caffe's parse_log.py's
    signature); a table without rows is not written. Returns the paths written; ``verbose``
    prints what was written and what was not."""
    base = os.path.join(output_dir, os.path.basename(log_path))
    written = []
    for path, rows in ((base + ".train", train_rows), (base + ".test", test_rows)):
        if write_csv(path, rows, delimiter):
            written.append(path)
            if verbose:
                print("Wrote %s" % path)
        elif verbose:
            print("Not writing %s; no lines to write" % path)
    return tuple(written)


# ---- plotting ---------------------------------------------------------------------------
def _matplotlib():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise CaffeError("plotting needs matplotlib: pip install matplotlib") from None
    return plt


def _check_image_type(path):
    """The image type is the output file's extension: one that matplotlib writes."""
    from matplotlib.backend_bases import FigureCanvasBase

    known = FigureCanvasBase.get_supported_filetypes()
    ext = os.path.splitext(path)[1][1:].lower()
    if ext not in known:
        raise CaffeError("%s: %s (the extension names the image type: %s)" % (
            path, "unknown image type '.%s'" % ext if ext else "no extension",
            ", ".join("." + k for k in sorted(known))))


def _output_names(rows):
    """The net outputs of parsed rows (their columns but the iteration, time and rate)."""
    return [k for r in rows[:1] for k in r if k not in ("NumIters", "Seconds", "LearningRate")]


def _series(rows, key):
    xs = [r["NumIters"] for r in rows if key in r]
    ys = [r[key] for r in rows if key in r]
    return xs, ys


def plot_log(log_path, png_path, loss_key=None, accuracy_key=None):
    """A PNG of the training loss, the test loss and the test accuracy against iterations."""
    train_rows, test_rows = parse_log(log_path)
    if not train_rows and not test_rows:
        raise CaffeError("%s: no 'Train net output' or 'Test net output' lines found; is it a "
                         "training log?" % log_path)
    plt = _matplotlib()
    _check_image_type(png_path)

    def pick(rows, wanted, word):
        return wanted or next((k for k in _output_names(rows) if word in k.lower()), None)

    train_loss = pick(train_rows, loss_key, "loss")
    test_loss = pick(test_rows, loss_key, "loss")
    test_acc = pick(test_rows, accuracy_key, "acc")
    fig, ax = plt.subplots(figsize=(8, 5))
    if train_loss:
        ax.plot(*_series(train_rows, train_loss), label="train %s" % train_loss, color="C0")
    if test_loss:
        ax.plot(*_series(test_rows, test_loss), "o-", label="test %s" % test_loss, color="C1")
    ax.set_xlabel("Iterations")
    ax.set_ylabel("loss")
    handles, labels = ax.get_legend_handles_labels()
    if test_acc:
        ax2 = ax.twinx()
        ax2.plot(*_series(test_rows, test_acc), "s-", label="test %s" % test_acc, color="C2")
        ax2.set_ylabel(test_acc)
        h2, l2 = ax2.get_legend_handles_labels()
        handles += h2
        labels += l2
    if handles:
        ax.legend(handles, labels, loc="center right")
    ax.set_title(os.path.basename(log_path))
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return png_path


# ---- Caffe's chart types (its tools/extra/plot_training_log.py.example) --------------------
# (data, quantity, x axis): data "Test" is the test net outputs, "Train" the solver's display
CHART_TYPES = (("Test", "accuracy", "Iters"), ("Test", "accuracy", "Seconds"),
               ("Test", "loss", "Iters"), ("Test", "loss", "Seconds"),
               ("Train", "learning rate", "Iters"), ("Train", "learning rate", "Seconds"),
               ("Train", "loss", "Iters"), ("Train", "loss", "Seconds"))


def chart_name(chart_type):
    """``Test accuracy vs. Iters`` and so on."""
    return "%s %s vs. %s" % CHART_TYPES[chart_type]


def _output_key(rows, wanted, word, flag, data):
    outputs = _output_names(rows)
    if not outputs:
        raise CaffeError("no '%s net output' lines; is it a training log?" % data)
    if wanted:
        if wanted in outputs:
            return wanted
        raise CaffeError("no %s net output named '%s' (its outputs: %s)"
                         % (data, wanted, ", ".join(outputs)))
    for k in outputs:
        if word in k.lower():
            return k
    raise CaffeError("no %s net output whose name has '%s' (its outputs: %s); name one with %s"
                     % (data, word, ", ".join(outputs), flag))


def chart_series(chart_type, log_path, loss_key=None, accuracy_key=None):
    """(xs, ys) of a chart type for one log. Test accuracy and loss are test net outputs (the
    first whose name has "acc" or "loss", or ``accuracy_key`` / ``loss_key``); the train loss
    is the solver's ``Iteration N, loss = x`` (or the train net output ``loss_key``) and the
    learning rate its ``Iteration N, lr = x``; Seconds count from "Solving"."""
    data, quantity, axis = CHART_TYPES[chart_type]
    train_rows, test_rows, losses, rates = _read_log(log_path)
    try:
        if data == "Train" and (quantity == "learning rate" or not loss_key):
            points, name = ((rates, "lr") if quantity == "learning rate" else (losses, "loss"))
            if not points:
                raise CaffeError("no 'Iteration N, %s = x' lines; is it a training log?" % name)
        else:
            rows = test_rows if data == "Test" else train_rows
            word, wanted, flag = (("acc", accuracy_key, "--accuracy") if quantity == "accuracy"
                                  else ("loss", loss_key, "--loss"))
            key = _output_key(rows, wanted, word, flag, data)
            points = [(r["NumIters"], r["Seconds"], r[key]) for r in rows if key in r]
    except CaffeError as exc:
        raise CaffeError("%s: %s: %s" % (log_path, chart_name(chart_type), exc)) from None
    x = 0 if axis == "Iters" else 1
    return [p[x] for p in points], [p[2] for p in points]


def _log_label(log_path):
    name = os.path.basename(log_path)
    return name[:-4] if name.endswith(".log") and len(name) > 4 else name


def plot_chart(chart_type, image_path, log_paths, loss_key=None, accuracy_key=None):
    """Draw one of Caffe's chart types, one line per log, into ``image_path`` (its type from
    the extension). Returns what was drawn: [(label, xs, ys)] as the plot's lines hold it."""
    if not 0 <= chart_type < len(CHART_TYPES):
        raise CaffeError("chart type %d is not one of 0-%d" % (chart_type, len(CHART_TYPES) - 1))
    series = [(_log_label(p), chart_series(chart_type, p, loss_key, accuracy_key))
              for p in log_paths]
    plt = _matplotlib()
    _check_image_type(image_path)
    data, quantity, axis = CHART_TYPES[chart_type]
    fig, ax = plt.subplots(figsize=(8, 5))
    markers = "os^vDx+*"
    for i, (label, (xs, ys)) in enumerate(series):
        ax.plot(xs, ys, label=label, marker=markers[i % len(markers)], linewidth=0.75)
    ax.set_title(chart_name(chart_type))
    ax.set_xlabel(axis)
    ax.set_ylabel("%s %s" % (data, quantity))
    ax.legend(loc="lower right" if quantity == "accuracy" else "upper right")
    fig.tight_layout()
    fig.savefig(image_path, dpi=100)
    drawn = [(line.get_label(), list(line.get_xdata()), list(line.get_ydata()))
             for line in ax.get_lines()]
    plt.close(fig)
    return drawn
