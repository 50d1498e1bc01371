"""gflags-style boolean flags for the dataset tools: ``-gray``, ``--gray=true``,
``--gray=false``, ``--nogray``."""

import argparse


def add_bool_flag(parser, name, help_text, default=False):
    parser.add_argument("--" + name, "--%s=true" % name, "--%s=1" % name, dest=name,
                        action="store_true", default=default, help=help_text)
    parser.add_argument("--%s=false" % name, "--%s=0" % name, "--no" + name, dest=name,
                        action="store_false", help=argparse.SUPPRESS)


def add_backend_flag(parser):
    parser.add_argument("--backend", default="lmdb", choices=("lmdb", "leveldb"),
                        type=str.lower, help="the database format (default lmdb)")
