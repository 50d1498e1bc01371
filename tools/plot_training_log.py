#!/usr/bin/env python3
"""Plot a training log's loss and accuracy against iterations into a PNG.

    python tools/plot_training_log.py LOGFILE OUTPUT.png [--loss NAME] [--accuracy NAME]

Needs matplotlib (pip install matplotlib). The training loss comes from the "Train net output"
lines, the test loss and accuracy from the "Test net output" lines (outputs whose names contain
"loss" and "acc", unless named with --loss / --accuracy).
"""

import argparse
import sys

from pycaffe_lite.errors import CaffeError
from pycaffe_lite.tools_log import plot_log


def main(argv=None):
    parser = argparse.ArgumentParser(description="Plot loss and accuracy of a Caffe training "
                                     "log against iterations")
    parser.add_argument("logfile_path", help="path to the log file")
    parser.add_argument("png_path", help="the PNG file to write")
    parser.add_argument("--loss", default=None, help="the loss output's name")
    parser.add_argument("--accuracy", default=None, help="the accuracy output's name")
    args = parser.parse_args(argv)
    try:
        plot_log(args.logfile_path, args.png_path, args.loss, args.accuracy)
    except (CaffeError, OSError) as exc:
        print("plot_training_log: error: %s" % exc, file=sys.stderr)
        return 1
    print("Wrote %s" % args.png_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
