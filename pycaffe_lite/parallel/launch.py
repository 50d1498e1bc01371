"""Starting and running the ranks of a data-parallel job from the command line.

- :func:`join` decides, before any training, whether this process is one rank of a job: under
  an MPI launcher (``PMI_RANK``, ``OMPI_COMM_WORLD_RANK``, ``PMIX_RANK``, ... set) it joins the
  job through mpi4py, and stops with a clear error when mpi4py is missing or sees a different
  job size than the launcher announced (an mpi4py built against another MPI) — never N
  unsynchronised copies writing the same snapshots;
- :func:`relaunch_command` is the ``mpiexec`` line that runs one process per listed GPU
  (``--gpu 0,1,2,3`` / ``--gpu all``), with ``mpiexec`` taken next to the Python interpreter
  (the ``mpi`` extra installs it there) or from PATH;
- :func:`rank_logging`: rank 0 logs everything in glog format; the other ranks only warnings
  and errors, each line prefixed with ``[rank r]``;
- :func:`fail`: a rank that raises logs the error with its rank and aborts the whole job
  (MPI_Abort), so the other ranks never wait in a collective for it. A rank that is killed is
  detected by the launcher, which ends the job and names the rank.
"""

import logging
import os
import shutil
import sys

from ..errors import CaffeError
from .. import ranks
from . import context
from .comm import MPI_EXTRA, MPIComm
from .watchdog import flush_logs

log = logging.getLogger("pycaffe_lite")


def find_mpiexec():
    """``mpiexec`` next to the Python interpreter (a venv's bin folder), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.isfile(here) and os.access(here, os.X_OK):
        return here
    found = shutil.which("mpiexec")
    if found is None:
        raise CaffeError("one process per GPU needs MPI's mpiexec, which is neither next to %s "
                         "nor on PATH: %s" % (sys.executable, MPI_EXTRA))
    return found


def relaunch_command(n, argv):
    """The command that runs ``pycaffe-lite argv...`` as ``n`` ranks on this machine."""
    return [find_mpiexec(), "-n", str(int(n)), sys.executable, "-m", "pycaffe_lite.cli"] + \
        list(argv)


def run_launcher(command):
    """Run ``command`` (mpiexec ...) and return its exit status. Ctrl-C reaches mpiexec, which
    forwards it to the ranks (they stop together, snapshotting as --sigint_effect says): this
    process only waits, instead of killing mpiexec and leaving the ranks behind."""
    import signal
    import subprocess
    proc = subprocess.Popen(command)
    previous = signal.signal(signal.SIGINT, lambda signum, frame: None)
    try:
        return proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)


def join(environ=None):
    """An MPIComm when this process was started by an MPI launcher, else None."""
    launched = context.launcher_rank(environ)
    if launched is None:
        return None
    variable, rank = launched
    announced = context.launcher_size(environ)
    try:
        comm = MPIComm()
    except CaffeError as exc:
        raise CaffeError("this process was started by an MPI launcher (%s=%d) but cannot join "
                         "the job: %s. Refusing to train as an independent copy (the copies "
                         "would overwrite each other's snapshots)." % (variable, rank, exc)) \
            from None
    if announced is not None and announced != comm.size:
        raise CaffeError("the MPI launcher started %d processes (this is rank %d) but mpi4py "
                         "sees a job of %d: mpi4py is built against another MPI than the "
                         "launcher's mpiexec (use the mpiexec of the same MPI, e.g. the one "
                         "next to %s). Refusing to train as independent copies."
                         % (announced, rank, comm.size, sys.executable))
    ranks.reset()
    ranks.set_solver_count(comm.size)
    ranks.set_solver_rank(comm.rank)
    ranks.set_multiprocess(comm.size > 1)
    return comm


class _RankPrefix(logging.Filter):
    def __init__(self, rank):
        super().__init__()
        self.prefix = "[rank %d] " % rank

    def filter(self, record):
        if not getattr(record, "_rank_prefixed", False):
            record.msg = self.prefix + str(record.msg)
            record._rank_prefixed = True
        return True


def rank_logging(rank):
    """Rank 0 keeps the log as it is; other ranks log warnings and errors with their rank."""
    if rank == 0:
        return
    logger = logging.getLogger("pycaffe_lite")
    logger.setLevel(logging.WARNING)
    logger.addFilter(_RankPrefix(rank))


def fail(comm, exc):
    """Report ``exc`` on this rank and end the whole job (never returns)."""
    import socket
    rank = comm.rank
    log.error("rank %d of %d failed: %s: %s; aborting the job on host %s (pid %d)", rank,
              comm.size, type(exc).__name__, exc, socket.gethostname(), os.getpid())
    flush_logs()
    comm.abort(1)


def log_ranks(comm):
    """Rank 0 logs which process (host, pid) runs each rank: a launcher that reports a dead
    process by its pid (MPICH's "BAD TERMINATION ... PID n") is then read as a rank."""
    import socket
    where = comm.comm.gather((comm.rank, socket.gethostname(), os.getpid()), root=0)
    if comm.rank == 0:
        log.info("Ranks: %s", ", ".join("rank %d = pid %d on %s" % (r, pid, host)
                                        for r, host, pid in where))
