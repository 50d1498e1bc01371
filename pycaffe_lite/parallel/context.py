"""The data-parallel job as its launcher describes it: the environment variables an MPI
launcher sets (:func:`launcher_rank`, :func:`launcher_size`). The process's solver count and
rank live in the core (:mod:`pycaffe_lite.ranks`, as Caffe keeps them in common.hpp).
"""

import os

#: environment variables an MPI launcher sets in every process it starts (MPICH/Hydra and Intel
#: MPI: PMI_RANK; Open MPI: OMPI_COMM_WORLD_RANK; PMIx launchers; Slurm's srun with PMI2)
LAUNCHER_RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK",
                           "MPI_LOCALRANKID")
LAUNCHER_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")


def launcher_rank(environ=None):
    """The rank an MPI launcher gave this process (from its environment), or None."""
    environ = os.environ if environ is None else environ
    for name in LAUNCHER_RANK_VARIABLES:
        value = environ.get(name)
        if value not in (None, ""):
            try:
                return name, int(value)
            except ValueError:
                continue
    return None


def launcher_size(environ=None):
    environ = os.environ if environ is None else environ
    for name in LAUNCHER_SIZE_VARIABLES:
        value = environ.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                continue
    return None
