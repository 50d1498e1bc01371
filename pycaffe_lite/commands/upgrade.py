"""Caffe's upgrade tools as subcommands: rewrite legacy net and solver files in the current
format.

- ``pycaffe-lite upgrade_net_proto_text IN OUT``: V0/V1 (or otherwise deprecated) prototxt ->
  current prototxt;
- ``pycaffe-lite upgrade_net_proto_binary IN OUT``: the same for binary nets (.caffemodel);
- ``pycaffe-lite upgrade_solver_proto_text IN OUT``: ``solver_type`` enum -> ``type`` string.

Exit codes as Caffe's tools: 0 written (also when the input was already current), 2 the input
cannot be parsed, 1 the upgrade failed (nothing is written then).
"""

import logging
import sys

from ..proto import protoio, upgrade
from ..errors import ProtoError
from ..proto import caffe_pb2
from . import help_of

log = logging.getLogger("pycaffe_lite")


def _add_io(kind):
    def add_arguments(p):
        p.add_argument("input", metavar="IN", help="%s to upgrade" % kind)
        p.add_argument("output", metavar="OUT", help="where to write the upgraded %s" % kind)
    return add_arguments


def _read(path, message, binary):
    try:
        if binary:
            return protoio.read_binary(path, message)
        return protoio.read_text(path, message)
    except ProtoError as exc:
        print("Failed to parse input %s file as %s: %s"
              % ("binary" if binary else "text", message.DESCRIPTOR.name, exc), file=sys.stderr)
        return None


def _upgrade(param, path, needs_upgrade, upgrade_as_needed):
    """Upgrade ``param`` (read from ``path``) in place when ``needs_upgrade(param)``; False
    (after printing why) when the upgrade fails."""
    if needs_upgrade(param):
        try:
            upgrade_as_needed(param, path)
        except ProtoError as exc:
            print("Encountered error(s) while upgrading %s: %s" % (path, exc), file=sys.stderr)
            return False
    else:
        log.warning("File already in latest proto format: %s", path)
    return True


def _upgrade_net(args, binary):
    param = _read(args.input, caffe_pb2.NetParameter(), binary)
    if param is None:
        return 2
    # a binary net is a weights file: a V1 layer of unknown type is kept without one, as the
    # weights loader reads it
    if not _upgrade(param, args.input, upgrade.net_needs_upgrade,
                    lambda p, path: upgrade.upgrade_net_as_needed(p, path, weights=binary)):
        return 1
    if binary:
        protoio.write_binary(param, args.output)
        log.info("Wrote upgraded NetParameter binary proto to %s", args.output)
    else:
        protoio.write_text(param, args.output)
        log.info("Wrote upgraded NetParameter text proto to %s", args.output)
    return 0


def run_net_text(args):
    return _upgrade_net(args, binary=False)


def run_net_binary(args):
    return _upgrade_net(args, binary=True)


def run_solver_text(args):
    param = _read(args.input, caffe_pb2.SolverParameter(), binary=False)
    if param is None:
        return 2
    if not _upgrade(param, args.input, upgrade.solver_needs_upgrade,
                    upgrade.upgrade_solver_as_needed):
        return 1
    protoio.write_text(param, args.output)
    log.info("Wrote upgraded SolverParameter text proto to %s", args.output)
    return 0


COMMANDS = [
    ("upgrade_net_proto_text", help_of("upgrade_net_proto_text"),
     _add_io("net prototxt"), run_net_text),
    ("upgrade_net_proto_binary", help_of("upgrade_net_proto_binary"),
     _add_io("binary net"), run_net_binary),
    ("upgrade_solver_proto_text", help_of("upgrade_solver_proto_text"),
     _add_io("solver prototxt"), run_solver_text),
]
