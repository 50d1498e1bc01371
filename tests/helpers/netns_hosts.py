"""Machines for the multi-host tests: Linux network namespaces joined by a switch.

:class:`Hosts` makes ``n`` hosts (2-4), each a network namespace with one interface ``pcl0``
(address 198.18.0.<i>/24, from the benchmarking range, used only inside these namespaces),
joined through veth pairs to a bridge in a switch namespace of its own; nothing is added to the
namespace the tests run in. A host's link can be limited with ``tc ... tbf`` (both directions)
and cut (``ip link set pcl0 down``). Jobs start with MPICH's own multi-host path,
``mpiexec -hosts 198.18.0.1,198.18.0.2 ...``: mpiexec runs on host 1 and hydra's launcher (the
``-launcher-exec`` script written here, in place of ssh) enters a host's namespace with a
hostname of its own (``h1``, ``h2``, ...) and runs the hydra proxy there.

MPICH's UCX moves data between processes of one kernel through shared memory whatever their
namespaces; ``UCX_TLS=tcp`` and ``UCX_NET_DEVICES=pcl0`` (:meth:`Hosts.env`) make it use TCP
over the host's link, as between machines. Ranks of one host still share memory through
MPICH's own intra-node path (hydra tells MPICH which ranks share a host).

Everything is removed on :meth:`Hosts.close` (processes left in the namespaces are killed,
then the namespaces deleted), at interpreter exit too; names carry a random tag, so parallel
runs never meet.
"""

import atexit
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import uuid

from helpers.mpi import Job, mpi_available, mpiexec

#: the interface every host sees, and the switch's bridge
IFACE = "pcl0"
SUBNET = "198.18.0.%d"

LAUNCHER = """#!/bin/sh
# hydra's launcher in place of ssh: [ssh options] HOST COMMAND...; enters HOST's namespace
while [ $# -gt 0 ]; do case "$1" in -*) shift;; *) break;; esac; done
host=$1; shift
case "$host" in
%(cases)s
*) echo "no emulated host $host" >&2; exit 255;;
esac
exec ip netns exec "$ns" unshare --uts sh -c "hostname $name && exec $*"
"""

_reason = []


def _ip(*args, check=True):
    return subprocess.run(["ip"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, check=check)


def unavailable_reason():
    """Why namespaces cannot be made here (a string), or None when they can."""
    if _reason:
        return _reason[0]
    reason = None
    if not mpi_available():
        reason = "needs mpi4py and mpiexec (pip install '.[mpi]')"
    elif sys.platform != "linux":
        reason = "network namespaces are Linux's"
    elif os.geteuid() != 0:
        reason = "making network namespaces needs root"
    else:
        missing = [t for t in ("ip", "tc", "unshare") if shutil.which(t) is None]
        if missing:
            reason = "needs %s (iproute2, util-linux)" % " and ".join(missing)
    if reason is None:
        probe = "pclp" + uuid.uuid4().hex[:8]
        made = _ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            reason = "cannot make a network namespace: %s" % made.stderr.strip()
        else:
            reason = _probe(probe)
            _ip("netns", "del", probe, check=False)
    _reason.append(reason)
    return reason


def rate_bits(rate):
    """tc's rate ("100mbit", "1gbit", "500kbit") in bits per second."""
    for unit, scale in (("kbit", 1e3), ("mbit", 1e6), ("gbit", 1e9), ("bit", 1.0)):
        if rate.endswith(unit):
            return float(rate[:-len(unit)]) * scale
    raise ValueError("a rate in bit, kbit, mbit or gbit, got %r" % rate)


def _pids(ns):
    out = _ip("netns", "pids", ns, check=False).stdout
    return [int(p) for p in out.split()]


def _probe(ns):
    """What the hosts need, tried inside the namespace ``ns``: a veth pair, a bridge, tbf."""
    steps = [("a veth pair", ["ip", "link", "add", "pa", "type", "veth", "peer", "name", "pb"]),
             ("a bridge", ["ip", "link", "add", "pbr", "type", "bridge"]),
             ("tc's tbf", ["tc", "qdisc", "add", "dev", "pa", "root", "tbf", "rate", "1mbit",
                           "burst", "16kb", "latency", "50ms"])]
    for what, command in steps:
        done = subprocess.run(["ip", "netns", "exec", ns] + command, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            return "cannot make %s in a network namespace: %s" % (what, done.stdout.strip())
    return None


class Hosts:
    """``n`` emulated hosts; ``rate`` (e.g. ``"100mbit"``) limits every host's link."""

    def __init__(self, n=2, rate=None):
        if not 2 <= n <= 254:
            raise ValueError("2 to 254 hosts")
        self.n = n
        self.tag = "pcl" + uuid.uuid4().hex[:8]
        self.switch = self.tag + "s"
        self.namespaces = [self.tag + "h%d" % (i + 1) for i in range(n)]
        self.names = ["h%d" % (i + 1) for i in range(n)]
        self.addresses = [SUBNET % (i + 1) for i in range(n)]
        self.folder = tempfile.mkdtemp(prefix=self.tag)
        self._made = []
        self._closed = False
        atexit.register(self.close)
        try:
            self._build()
            self.launcher = self._write_launcher()
            if rate:
                for i in range(n):
                    self.set_rate(i, rate)
        except BaseException:
            self.close()
            raise

    def _build(self):
        _ip("netns", "add", self.switch)
        self._made.append(self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i, ns in enumerate(self.namespaces):
            _ip("netns", "add", ns)
            self._made.append(ns)
            port = "p%d" % (i + 1)
            # both ends are made inside the namespaces: no name in the caller's namespace
            _ip("link", "add", IFACE, "netns", ns, "type", "veth", "peer", "name", port,
                "netns", self.switch)
            _ip("-n", self.switch, "link", "set", port, "master", "br0")
            _ip("-n", self.switch, "link", "set", port, "up")
            _ip("-n", ns, "addr", "add", self.addresses[i] + "/24", "dev", IFACE)
            _ip("-n", ns, "link", "set", IFACE, "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def _write_launcher(self):
        cases = "\n".join('%s) ns=%s; name=%s;;' % (a, ns, name) for a, ns, name in
                          zip(self.addresses, self.namespaces, self.names))
        path = os.path.join(self.folder, "launch.sh")
        with open(path, "w") as f:
            f.write(LAUNCHER % dict(cases=cases))
        os.chmod(path, stat.S_IRWXU)
        return path

    # -- links -------------------------------------------------------------------------------
    def set_rate(self, i, rate):
        """Limit host i's link to ``rate`` (tc's units: "100mbit") in both directions. The
        bucket holds 10 ms of traffic (at least 64 KB): a smaller one starves fast links."""
        burst = "%dkb" % max(64, rate_bits(rate) / 8 / 100 / 1024)
        for ns, dev in ((self.namespaces[i], IFACE), (self.switch, "p%d" % (i + 1))):
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev,
                            "root", "tbf", "rate", rate, "burst", burst, "latency", "200ms"],
                           check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def cut(self, i):
        """Take host i's link down (the cable pulled)."""
        _ip("-n", self.namespaces[i], "link", "set", IFACE, "down")

    def counters(self, i):
        """(bytes sent, bytes received) on host i's link so far."""
        base = "/sys/class/net/%s/statistics/" % IFACE
        out = subprocess.run(["ip", "netns", "exec", self.namespaces[i], "cat",
                              base + "tx_bytes", base + "rx_bytes"], check=True,
                             stdout=subprocess.PIPE, text=True).stdout.split()
        return int(out[0]), int(out[1])

    # -- jobs --------------------------------------------------------------------------------
    def env(self, extra=None):
        """The environment that makes MPICH's UCX cross the links over TCP."""
        env = {"UCX_TLS": "tcp", "UCX_NET_DEVICES": IFACE, "MPIR_CVAR_CH4_NETMOD": "ucx"}
        env.update(extra or {})
        return env

    def command(self, per_host, argv):
        """``mpiexec`` on host 1 with ``per_host`` ranks on each host, running ``argv``."""
        hosts = ",".join("%s:%d" % (a, per_host) for a in self.addresses)
        return ["ip", "netns", "exec", self.namespaces[0], "unshare", "--uts", "sh", "-c",
                'hostname %s && exec "$@"' % self.names[0], "sh", mpiexec(),
                "-launcher", "ssh", "-launcher-exec", self.launcher, "-hosts", hosts,
                "-n", str(per_host * self.n)] + list(argv)

    def train_command(self, per_host, args):
        return self.command(per_host, [sys.executable, "-m", "pycaffe_lite.cli"] + list(args))

    def job(self, per_host, args, cwd, env=None):
        """A running ``pycaffe-lite args...`` job (helpers.mpi.Job) over the hosts."""
        return Job(None, None, cwd, env=self.env(env),
                   command=self.train_command(per_host, args))

    def run(self, per_host, argv, cwd, env=None, timeout=None):
        """Run ``argv`` (a full command) on the hosts; (exit code, output)."""
        job = Job(None, None, cwd, env=self.env(env), command=self.command(per_host, argv))
        try:
            return job.finish(timeout=timeout or 300)
        finally:
            job.kill()

    def pids(self, i):
        """The processes running in host i's namespace."""
        return _pids(self.namespaces[i])

    def close(self):
        if self._closed:
            return
        self._closed = True
        for ns in self._made:
            for pid in _pids(ns):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for ns in reversed(self._made):
            _ip("netns", "del", ns, check=False)
        shutil.rmtree(self.folder, ignore_errors=True)
