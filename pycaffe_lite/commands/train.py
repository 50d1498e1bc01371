"""``pycaffe-lite train``: train or fine-tune a model, as ``caffe train`` does.

Flags are Caffe's (single-dash spellings work too)::

    pycaffe-lite train --solver S.prototxt [--weights a.caffemodel,b.caffemodel |
                       --snapshot S_iter_N.solverstate] [--gpu 0] [--level N] [--stage a,b]
                       [--sigint_effect stop|snapshot|none] [--sighup_effect snapshot|stop|none]
                       [--tensorboard DIR [--tensorboard_histograms N]] [--no_python_layers]
                       [--collective_timeout SECONDS]

The solver loads the files of its ``weights:`` fields into its nets; ``--weights`` replaces
them and ``--snapshot`` ignores them, as Caffe's. Without ``--gpu`` the solver file's own
``solver_mode: GPU`` (and ``device_id``) selects the GPU; a file without ``solver_mode``
trains on the CPU, as with ``caffe train``. ``solver_mode: GPU`` on a machine with no usable
GPU falls back to the CPU with one warning (Caffe would abort); an explicit ``--gpu`` that
cannot be honoured is an error. SIGINT stops (and the final snapshot is written, as
``snapshot_after_train`` asks); SIGHUP writes a snapshot and goes on. Under an MPI launcher, a
rank that waits longer than ``--collective_timeout`` seconds in one collective (a frozen host,
a cut link) ends the whole job with an error naming the ranks and hosts that stopped
answering.
"""

import logging
import os
import resource
import sys
import time

from .. import backend, cuda_graphs, ranks
from ..proto import protoio
from ..errors import CaffeError
from ..parallel import launch
from ..parallel.watchdog import DEFAULT_TIMEOUT_S
from ..signals import SignalHandler, SolverAction
from ..tools_log import use_glog_format
from . import add_net_flags, help_of, weight_files

log = logging.getLogger("pycaffe_lite")


def add_cuda_graph_flag(p):
    p.add_argument("--cuda_graph", default="on", choices=("on", "off"),
                   help="GPU mode: capture TEST forwards and training iterations into CUDA "
                        "graphs and replay them (on, the default) or run them layer by layer "
                        "(off)")


def add_arguments(p):
    p.add_argument("--solver", default="", help="the solver definition (prototxt)")
    p.add_argument("--weights", default="",
                   help="pretrained weights to fine-tune from, separated by ','; they replace "
                        "the solver's weights: fields; cannot be combined with --snapshot "
                        "(which ignores those fields)")
    p.add_argument("--snapshot", default="", help="a .solverstate (or .solverstate.h5) to "
                   "resume training from")
    p.add_argument("--gpu", default="",
                   help="run on the GPU with this device id; several ids ('0,1,2,3') or "
                        "'all' start one data-parallel process per GPU (under mpiexec, rank r "
                        "takes the r-th listed id, modulo their number)")
    p.add_argument("--level", type=int, default=0, help="the net level (NetState)")
    p.add_argument("--stage", default="", help="net stages, separated by ','")
    p.add_argument("--sigint_effect", default=SolverAction.STOP,
                   choices=SolverAction.ALL, help="on SIGINT (Ctrl-C): stop (default; the "
                   "final snapshot is written), snapshot, or none")
    p.add_argument("--sighup_effect", default=SolverAction.SNAPSHOT,
                   choices=SolverAction.ALL, help="on SIGHUP: snapshot (default), stop or none")
    p.add_argument("--tensorboard", default="", metavar="DIR",
                   help="write TensorBoard event files (train/loss, train/lr, train/<output>, "
                        "test/<output>) into DIR (needs the tensorboard extra)")
    p.add_argument("--tensorboard_histograms", type=int, default=0, metavar="N",
                   help="with --tensorboard: weight and gradient histograms every N "
                        "iterations (0: none)")
    add_net_flags(p)
    add_cuda_graph_flag(p)
    p.add_argument("--collective_timeout", type=float, default=DEFAULT_TIMEOUT_S,
                   metavar="SECONDS",
                   help="data-parallel jobs: a rank that waits longer than this in one "
                        "collective (a frozen host, a cut link) ends the whole job with an "
                        "error naming the ranks that stopped answering (default %(default)g; "
                        "0: wait forever). Make it longer than rank 0's tests and snapshots.")


def parse_gpus(value):
    """Device ids from ``--gpu`` ('0', '0,1', 'all': every device, or [0] when none)."""
    if value == "all":
        return list(range(backend.device_count())) or [0]
    ids = []
    for part in str(value).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            ids.append(int(part))
        except ValueError:
            raise CaffeError("--gpu takes device ids separated by ',' (e.g. --gpu 0), got "
                             "'%s'" % value) from None
        if ids[-1] < 0:
            raise CaffeError("--gpu: device id must be >= 0, got %d" % ids[-1])
    return ids


def select_mode(gpu_flag, solver_mode=None, device_id=0):
    """Set CPU or GPU mode as ``caffe train`` would, falling back to the CPU (with a warning)
    when the solver asks for the GPU but none is usable. Returns the device id or None."""
    gpus = parse_gpus(gpu_flag) if gpu_flag else []
    rank, count = ranks.solver_rank(), ranks.solver_count()
    if gpus:
        device = gpus[rank % len(gpus)]  # under mpiexec: rank r takes the r-th listed id
        backend.set_device(device)
        backend.set_mode_gpu()  # raises GPUUnavailableError with what to do
        log.info("Using GPUs %s", ", ".join(str(g) for g in gpus[:count]))
        return device
    if solver_mode == 1:  # SolverParameter.GPU
        if count > 1:
            device_id = rank % max(backend.device_count(), 1)
        try:
            backend.set_device(device_id)
            backend.set_mode_gpu()
        except backend.GPUUnavailableError as exc:
            log.warning("solver_mode is GPU but no GPU is usable (%s); training on the CPU "
                        "instead. Set solver_mode: CPU to silence this warning.", exc)
            backend.set_mode_cpu()
            log.info("Use CPU.")
            return None
        log.info("Using GPUs %d", device_id)
        return device_id
    backend.set_mode_cpu()
    log.info("Use CPU.")
    return None


def parse_stages(value):
    return [s for s in (value or "").split(",") if s]


def peak_rss_mib():
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return usage / 1024.0 if sys.platform != "darwin" else usage / (1024.0 * 1024.0)


def relaunch_argv(args):
    """The train command's flags, to run again under mpiexec."""
    argv = ["train", "--solver", args.solver, "--gpu", args.gpu, "--level", str(args.level),
            "--sigint_effect", args.sigint_effect, "--sighup_effect", args.sighup_effect,
            "--collective_timeout", "%g" % args.collective_timeout,
            "--cuda_graph", args.cuda_graph]
    for flag in ("weights", "snapshot", "stage"):
        if getattr(args, flag):
            argv += ["--" + flag, getattr(args, flag)]
    for module in getattr(args, "plugin", None) or []:
        argv += ["--plugin", module]
    if getattr(args, "no_python_layers", False):
        argv.append("--no_python_layers")
    if getattr(args, "tensorboard", ""):
        argv += ["--tensorboard", args.tensorboard,
                 "--tensorboard_histograms", str(args.tensorboard_histograms)]
    return argv


def run(args):
    use_glog_format()
    cuda_graphs.set_enabled(args.cuda_graph == "on")
    if not args.solver:
        raise CaffeError("need a solver definition to train: --solver path/to/solver.prototxt")
    if args.snapshot and args.weights:
        raise CaffeError("give a snapshot to resume training or weights to fine-tune, but not "
                         "both (--snapshot and --weights)")
    weight_files(args.weights)
    if args.tensorboard_histograms and not args.tensorboard:
        raise CaffeError("--tensorboard_histograms needs --tensorboard DIR")
    if args.tensorboard_histograms < 0:
        raise CaffeError("--tensorboard_histograms must be >= 0 (got %d)"
                         % args.tensorboard_histograms)
    if args.tensorboard:
        from .. import tensorboard
        tensorboard.load_writer()  # a missing extra is an error before anything is built
    if not args.collective_timeout >= 0:
        raise CaffeError("--collective_timeout takes seconds >= 0 (0: no timeout), got %g"
                         % args.collective_timeout)
    comm = launch.join()
    if comm is None and args.gpu and len(parse_gpus(args.gpu)) > 1:
        # Caffe's -gpu 0,1,2,3: one process per listed GPU on this machine
        command = launch.relaunch_command(len(parse_gpus(args.gpu)), relaunch_argv(args))
        log.info("Starting one process per GPU: %s", " ".join(command))
        return launch.run_launcher(command)
    if comm is None or comm.size == 1:
        return train(args, None)
    launch.rank_logging(comm.rank)
    try:
        comm.set_timeout(args.collective_timeout)
        launch.log_ranks(comm)
        status = train(args, comm)
        comm.close()
        return status
    except BaseException as exc:  # noqa: BLE001 - any failure must end every rank
        if isinstance(exc, SystemExit) and not exc.code:
            raise
        launch.fail(comm, exc)


def train(args, comm):
    from ..parallel import DataParallel, derive_rank_random_state, init
    from ..solvers import solver_class
    from ..solvers.example_data import prepare_missing_sources
    from ..solvers.progress import ProgressBar

    param = protoio.read_solver_param(args.solver)
    param.train_state.level = args.level
    param.train_state.stage.extend(parse_stages(args.stage))
    if args.snapshot or args.weights:  # as caffe train: the solver's weights: fields give way
        del param.weights[:]
        if args.weights:
            param.weights.append(args.weights)
    # as caffe train: only a solver_mode written in the file asks for the GPU (the field's
    # default, GPU, does not)
    select_mode(args.gpu, param.solver_mode if param.HasField("solver_mode") else None,
                param.device_id)
    if comm is not None and comm.rank == 0:
        prepare_missing_sources(param, args.solver)
    if comm is not None:
        comm.barrier()  # rank 0 made any missing example data first
    if comm is None:
        prepare_missing_sources(param, args.solver)

    cls = solver_class(param.type, "type in %s" % args.solver)
    base_dir = os.path.dirname(os.path.abspath(args.solver))
    with SignalHandler(args.sigint_effect, args.sighup_effect) as handler:
        solver = cls(param, base_dir, source_path=args.solver)
        solver.set_action_function(handler.get_action)
        if args.snapshot:
            log.info("Resuming from %s", args.snapshot)
            solver.restore(args.snapshot)
        if comm is not None:
            if args.snapshot:
                derive_rank_random_state(solver)
            if backend.mode() == backend.GPU:
                comm = init(comm, nccl=True)  # NCCL keeps --collective_timeout
            sync = DataParallel(solver, comm, actions=handler.get_action).attach()
            log.info("Data-parallel training on %d processes (batch size per process as in "
                     "the net): %s", comm.size, sync.describe())
        if args.tensorboard:
            from .. import tensorboard
            tensorboard.attach(solver, args.tensorboard, args.tensorboard_histograms)
        bar = None
        if ranks.root_solver() and ProgressBar.wanted():
            bar = ProgressBar(solver.max_iter).attach()
            solver.progress = bar
        log.info("Starting Optimization")
        start_iter = solver.iter
        t0 = time.perf_counter()
        try:
            solver.solve()
        finally:
            solver.close()
        elapsed = time.perf_counter() - t0
    done = solver.iter - start_iter
    log.info("Optimization Done.")
    log.info("Trained %d iterations in %.1f s (%.2f ms/iter, tests and snapshots included), "
             "peak memory %.0f MiB", done, elapsed, 1000.0 * elapsed / max(done, 1),
             peak_rss_mib())
    return 0


COMMANDS = [("train", help_of("train"), add_arguments, run)]
