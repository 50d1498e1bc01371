#!/usr/bin/env python3
"""Parse a Caffe or pycaffe-lite training log into two CSV files (Caffe's parse_log.py).

    python tools/parse_log.py LOGFILE OUTPUT_DIR [--delimiter ,] [--verbose]

Writes OUTPUT_DIR/<log name>.train and OUTPUT_DIR/<log name>.test with the columns NumIters,
Seconds, LearningRate and one column per net output (e.g. loss, accuracy); a log without
test (or train) outputs writes no .test (or .train) file, as Caffe's script.
"""

import argparse
import sys

from pycaffe_lite.errors import CaffeError
from pycaffe_lite.tools_log import parse_log, save_csv_files


def main(argv=None):
    parser = argparse.ArgumentParser(description="Parse a Caffe training log into two CSV "
                                     "files containing training and testing information")
    parser.add_argument("logfile_path", help="path to the log file")
    parser.add_argument("output_dir", help="folder for the output CSV files")
    parser.add_argument("--verbose", action="store_true", help="print the output file names")
    parser.add_argument("--delimiter", default=",",
                        help="column delimiter in the output files (default: ',')")
    args = parser.parse_args(argv)
    try:
        train_rows, test_rows = parse_log(args.logfile_path)
        save_csv_files(args.logfile_path, args.output_dir, train_rows, test_rows,
                       delimiter=args.delimiter, verbose=args.verbose)
    except (CaffeError, OSError) as exc:
        print("parse_log: error: %s" % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
