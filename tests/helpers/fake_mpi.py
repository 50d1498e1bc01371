"""A stand-in for mpi4py's module and communicator where a test builds a Watchdog without MPI:
a library without MPI_THREAD_MULTIPLE (no heartbeat exchange) and ranks on made-up hosts."""


class OneThreadMPI:
    """mpi4py's names for a library without MPI_THREAD_MULTIPLE: no heartbeat exchange."""
    THREAD_MULTIPLE = 3

    @staticmethod
    def Query_thread():
        return 1


class FakeComm:
    """``size`` ranks, this one ``rank``; rank r runs on host ``host_of(r)`` with pid
    ``first_pid + r``."""

    def __init__(self, rank, size, host_of=lambda r: "h%d" % (r + 1), first_pid=2000):
        self.rank, self.size = rank, size
        self.host_of, self.first_pid = host_of, first_pid

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.size

    def allgather(self, mine):
        return [(self.host_of(r), self.first_pid + r) for r in range(self.size)]

    def Abort(self, code):
        raise AssertionError("no abort in these tests")
