"""The ring-allreduce scaling model of data-parallel training, on paper.

Per iteration each rank computes for ``t_c`` (forward + backward of its own batch) and the
ranks average the gradients: a ring allreduce of B bytes over N ranks moves 2(N-1)/N x B bytes
through each rank's link, ``t_comm = 2(N-1)/N x B / bandwidth`` (latency, 2(N-1) steps of a few
microseconds, is left out: it matters only for small buffers). Without overlap an iteration
takes ``t_c + t_comm``; the parallel efficiency is ``t_c / (t_c + t_comm)`` and the speed-up
over one process ``N x efficiency``. With the backward pass hiding the communication entirely
(the best layer-wise reduction can do) the iteration takes ``max(t_c, t_comm)``.

A network "stops scaling" here at the first N whose efficiency without overlap falls below
50% (communication takes longer than computation: adding ranks then buys less than half of
what each costs). t_comm grows with N only through 2(N-1)/N, from B/bw (N = 2) to 2B/bw, so
that point is reached early or not at all.

Usage: python benchmarks/scaling_model.py --compute caffenet=MS,resnet50=MS
[--params NAME=COUNT,...] or --bench out.json [out2.json] (the --json files of
bench_parallel.py: the 1 rank x 1 thread time of each network is its t_c, its parameter count
its buffer). Every network with a time is modelled; one other than CaffeNet and ResNet-50
needs its parameter count, from a bench file or --params.
"""

import argparse
import json

PARAMS = {"caffenet": 60_965_224, "resnet50": 25_557_032}  # float32 gradients: 4 bytes each
BANDWIDTHS = (10, 25, 100)  # Gb/s
RANKS = (2, 4, 8, 16, 32, 64, 128, 256)


def ring_seconds(nbytes, ranks, gbit_per_s):
    return 2.0 * (ranks - 1) / ranks * nbytes / (gbit_per_s * 1e9 / 8)


def table(name, params, compute_s):
    nbytes = 4 * params
    lines = ["%s: %.1f M parameters (%.0f MB of float32 gradients), t_c = %.0f ms per "
             "iteration" % (name, params / 1e6, nbytes / 1e6, 1000 * compute_s), "",
             "| N | " + " | ".join("%d Gb/s: t_comm, efficiency, speed-up" % b
                                   for b in BANDWIDTHS) + " |",
             "|---|" + "---|" * len(BANDWIDTHS)]
    stops = {}
    for n in RANKS:
        cells = []
        for bw in BANDWIDTHS:
            t = ring_seconds(nbytes, n, bw)
            eff = compute_s / (compute_s + t)
            cells.append("%.0f ms, %.0f%%, %.1fx" % (1000 * t, 100 * eff, n * eff))
            if eff < 0.5 and bw not in stops:
                stops[bw] = n
        lines.append("| %d | %s |" % (n, " | ".join(cells)))
    lines.append("")
    for bw in BANDWIDTHS:
        verdict = ("stops scaling at N = %d" % stops[bw] if bw in stops else
                   "still above 50%% efficiency at N = %d" % RANKS[-1])
        # the compute time below which communication dominates from N = 2 / at N = 256
        low, high = ring_seconds(nbytes, 2, bw), ring_seconds(nbytes, RANKS[-1], bw)
        lines.append("- at %d Gb/s: %s; with an iteration shorter than %.0f ms (N = 2) to "
                     "%.0f ms (N = %d) communication would take longer than computation"
                     % (bw, verdict, 1000 * low, 1000 * high, RANKS[-1]))
    return "\n".join(lines)


def _pairs(parser, text, flag, kind):
    """``name=value,...`` of ``flag`` as {name: value}; a parser error naming the item."""
    found = {}
    for item in [i for i in text.split(",") if i]:
        name, _, value = item.partition("=")
        try:
            number = kind(value)
        except ValueError:
            number = None
        if not name or number is None or not 0 < number < float("inf"):
            parser.error("%s %s: expected NAME=%s with a positive number"
                         % (flag, item, "MS" if flag == "--compute" else "COUNT"))
        found[name] = number
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compute", default="", help="name=milliseconds per iteration, ...")
    ap.add_argument("--params", default="",
                    help="name=parameter count, ... (for nets other than caffenet, resnet50)")
    ap.add_argument("--bench", nargs="*", default=[], help="bench_parallel.py --json files")
    args = ap.parse_args()
    compute, params = {}, dict(PARAMS)
    for path in args.bench:
        try:
            with open(path) as f:
                runs = json.load(f)["runs"]
            for run in runs:
                if run["ranks"] == 1 and run["threads"] == 1:
                    compute[run["net"]] = run["ms_per_iter"] / 1000.0
                    params[run["net"]] = run["params"]
        except OSError as exc:
            ap.error("--bench %s: %s" % (path, exc.strerror or exc))
        except (ValueError, KeyError, TypeError) as exc:
            ap.error("--bench %s: not a bench_parallel.py --json file (%s: %s)"
                     % (path, type(exc).__name__, exc))
    params.update(_pairs(ap, args.params, "--params", int))
    for name, ms in _pairs(ap, args.compute, "--compute", float).items():
        compute[name] = ms / 1000.0
    if not compute:
        ap.error("nothing to model: give --compute caffenet=MS (and resnet50=MS) or --bench "
                 "with a bench_parallel.py --json file")
    unknown = [name for name in compute if name not in params]
    if unknown:
        ap.error("no parameter count for %s: add --params %s=COUNT"
                 % (", ".join(unknown), unknown[0]))
    for name in compute:
        print(table(name, params[name], compute[name]))
        print()


if __name__ == "__main__":
    main()
