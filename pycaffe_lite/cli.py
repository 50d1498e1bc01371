"""The ``pycaffe-lite`` command line, with Caffe's commands and flag spellings.

Caffe's single-dash long flags (``-solver x``, ``-gpu 0``) are accepted as well as ``--solver``,
so existing scripts work by replacing the binary's name.
"""

import argparse
import logging
import os
import sys

from . import __version__, plugins, python_layers
from .commands import TABLE, all_commands, commands_named
from .errors import CaffeError
from .tools_log import use_glog_format


def normalise_flags(argv):
    """``-solver`` -> ``--solver``; short single-letter flags are left alone."""
    out = []
    for a in argv:
        if a.startswith("-") and not a.startswith("--") and len(a) > 2 and a[1].isalpha():
            a = "-" + a
        out.append(a)
    return out


def one_line(message):
    """An error message on one line (a script reading stderr finds it whole)."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def describe_os_error(exc):
    """``path: reason`` for an OSError, as one line."""
    reason = exc.strerror or str(exc)
    names = [n for n in (exc.filename, exc.filename2) if n is not None]
    if names:
        return "%s: %s" % (" -> ".join(str(n) for n in names), reason)
    return reason


def build_parser(command=None, listing=False):
    """The parser of every command, or of ``command`` alone where it is one (only its module
    is imported then). With ``listing``, where ``command`` is none, a parser whose commands
    have their one-line help and nothing else, and no module imported: it prints ``--help``
    and the errors for no command or an unknown one as the whole parser does, and
    :func:`parse` turns to the command's own parser when it finds one."""
    commands = commands_named(command) if command is not None else None
    parser = argparse.ArgumentParser(
        prog="pycaffe-lite",
        description="Caffe-compatible deep learning: train, test and time prototxt nets.")
    parser.add_argument("--version", action="version", version="pycaffe-lite " + __version__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.command_parsers = {}
    if commands is None and listing:
        for name, (_, help_text) in TABLE.items():
            parser.command_parsers[name] = sub.add_parser(name, help=help_text,
                                                          description=help_text)
        return parser
    for name, help_text, add_arguments, run in commands or all_commands():
        p = sub.add_parser(name, help=help_text, description=help_text)
        add_arguments(p)
        p.set_defaults(run=run)
        parser.command_parsers[name] = p
    return parser


def parse(parser, argv):
    """The parsed arguments; argparse's error (usage and status 2) for no command, and the
    command's own usage for a flag it does not know."""
    args, unknown = parser.parse_known_args(argv)
    if args.command is not None and not getattr(args, "run", None):
        # a listing parser (build_parser) found a command after another word: its own parser
        return parse(build_parser(args.command), argv)
    if not getattr(args, "run", None):
        parser.error("a command is required (one of: %s)"
                     % ", ".join(sorted(parser.command_parsers)))
    if unknown:
        parser.command_parsers[args.command].error("unrecognized arguments: %s"
                                                   % " ".join(unknown))
    return args


def main(argv=None):
    argv = normalise_flags(sys.argv[1:] if argv is None else list(argv))
    logging.basicConfig(level=logging.INFO)
    use_glog_format()
    # `pycaffe-lite <command> ...`: that command's module alone; anything else (no command,
    # --help, an unknown name) lists them all from the table, importing none
    parser = build_parser(argv[0] if argv else None, listing=True)
    args = parse(parser, argv)
    saved = os.environ.get(python_layers.ENV)
    if getattr(args, "no_python_layers", False):
        python_layers.turn_off_for_command()  # the variable, which mpiexec's ranks see too
    try:
        if hasattr(args, "plugin"):  # a command that builds nets: its layers first
            plugins.load(args.plugin)
        return args.run(args) or 0
    except CaffeError as exc:
        print("pycaffe-lite %s: error: %s" % (args.command, one_line(str(exc))),
              file=sys.stderr)
        return 1
    except OSError as exc:
        # a user file or folder that cannot be opened, read or written: its name and why
        print("pycaffe-lite %s: error: %s" % (args.command, one_line(describe_os_error(exc))),
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("pycaffe-lite %s: interrupted" % args.command, file=sys.stderr)
        return 130
    finally:
        python_layers.forget_command()
        if saved is None:
            os.environ.pop(python_layers.ENV, None)
        else:
            os.environ[python_layers.ENV] = saved


if __name__ == "__main__":
    sys.exit(main())
