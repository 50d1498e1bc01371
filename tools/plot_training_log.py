#!/usr/bin/env python3
"""Plot training logs (Caffe's plot_training_log.py).

    python tools/plot_training_log.py CHART_TYPE OUTPUT.png LOGFILE [LOGFILE ...]
    python tools/plot_training_log.py LOGFILE OUTPUT.png [--loss NAME] [--accuracy NAME]

The first form draws one of Caffe's chart types (0-7, listed by --help), one line per log. The
second draws one log's training loss, test loss and test accuracy against iterations. The
image type is the output's extension (.png, .pdf, .svg, ...). Needs matplotlib (pip install
matplotlib). The test loss and accuracy are the "Test net output" lines whose names contain
"loss" and "acc", unless named with --loss / --accuracy.
"""

import argparse
import os
import re
import sys

from pycaffe_lite.errors import CaffeError
from pycaffe_lite.tools_log import CHART_TYPES, chart_name, plot_chart, plot_log


def _parser():
    charts = "\n".join("  %d: %s" % (i, chart_name(i)) for i in range(len(CHART_TYPES)))
    parser = argparse.ArgumentParser(
        usage="%(prog)s [-h] [--loss NAME] [--accuracy NAME] CHART_TYPE OUT.png LOG [LOG ...]"
              "\n       %(prog)s [-h] [--loss NAME] [--accuracy NAME] LOG OUT.png",
        description="Plot Caffe training logs: one of Caffe's chart types for one or more "
                    "logs, or one log's loss and accuracy against iterations",
        epilog="chart types:\n" + charts + "\n\nTest accuracy and loss are the test net "
               "outputs; the train loss is the solver's 'Iteration N, loss = x' (or the train "
               "net output --loss names), the learning rate its 'Iteration N, lr = x'.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arguments", nargs="+", metavar="ARG",
                        help="CHART_TYPE OUT.png LOG [LOG ...], or LOG OUT.png")
    parser.add_argument("--loss", default=None, metavar="NAME",
                        help="the loss output's name (default: the first with 'loss' in it)")
    parser.add_argument("--accuracy", default=None, metavar="NAME",
                        help="the accuracy output's name (default: the first with 'acc' in it)")
    return parser


def _chart_type(text):
    return int(text) if re.fullmatch(r"[-+]?\d+", text.strip()) else None


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)
    positional = args.arguments
    chart = _chart_type(positional[0])
    if len(positional) >= 3:
        if chart is None or not 0 <= chart < len(CHART_TYPES):
            parser.error("%r is not a chart type (0-%d; see --help); the form with a log "
                         "first is LOG OUT.png" % (positional[0], len(CHART_TYPES) - 1))
    elif len(positional) == 2:
        if chart is not None and not os.path.exists(positional[0]):
            parser.error("no log to plot: CHART_TYPE OUT.png LOG [LOG ...]")
        chart = None
    else:
        parser.error("expected CHART_TYPE OUT.png LOG [LOG ...] or LOG OUT.png")
    out = positional[1]
    try:
        if chart is None:
            plot_log(positional[0], out, args.loss, args.accuracy)
        else:
            plot_chart(chart, out, positional[2:], args.loss, args.accuracy)
    except (CaffeError, OSError) as exc:
        print("plot_training_log: error: %s" % exc, file=sys.stderr)
        return 1
    print("Wrote %s" % out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
