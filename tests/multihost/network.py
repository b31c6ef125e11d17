"""Hosts on one machine, joined by a real network: one Linux network namespace per host,
each with a veth pair whose other end is on a bridge (which holds the gateway address, so
this process reaches every host too). A host's processes see only its own interface; taking
that interface down cuts the host off as a pulled cable would.

Everything made here is torn down by ``Network.close()``: the processes (by their process
groups), the namespaces (their veth ends go with them) and the bridge."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.services import unavailable

IP = shutil.which("ip") or "/usr/sbin/ip"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([IP, *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done


def require_namespaces() -> None:
    """Skip (fail under SHARDYARD_REQUIRE_SERVICES=1) unless this process may create
    network namespaces and links: root, or CAP_NET_ADMIN and CAP_SYS_ADMIN."""
    if not Path(IP).exists():
        unavailable("creating network namespaces", "iproute2's `ip` is not installed")
    probe = f"sy{uuid.uuid4().hex[:8]}probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        who = "root" if os.geteuid() == 0 else f"uid {os.geteuid()} (not root)"
        unavailable(
            "creating network namespaces",
            f"`ip netns add` failed as {who}: {made.stderr.strip()}; "
            "the test needs root or CAP_NET_ADMIN + CAP_SYS_ADMIN",
        )
    _ip("netns", "del", probe, check=False)


@dataclass
class Host:
    name: str
    netns: str
    address: str
    veth: str  # the host's end, inside its namespace

    def exec_argv(self, argv: list[str]) -> list[str]:
        return [IP, "netns", "exec", self.netns, *argv]


@dataclass
class Network:
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    hosts: dict[str, Host] = field(default_factory=dict)
    procs: list[subprocess.Popen] = field(default_factory=list)
    prefix: str = ""
    bridge: str = ""

    def __post_init__(self) -> None:
        self.prefix = _free_prefix()
        self.bridge = f"sy{self.tag}br"
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    @property
    def gateway(self) -> str:
        return f"{self.prefix}.1"

    def add_host(self, name: str) -> Host:
        index = len(self.hosts) + 2
        host = Host(
            name=name,
            netns=f"sy{self.tag}-{name}",
            address=f"{self.prefix}.{index}",
            veth=f"sy{self.tag}{index}h",
        )
        outer = f"sy{self.tag}{index}b"
        _ip("netns", "add", host.netns)
        self.hosts[name] = host
        _ip("link", "add", host.veth, "type", "veth", "peer", "name", outer)
        _ip("link", "set", outer, "master", self.bridge)
        _ip("link", "set", outer, "up")
        _ip("link", "set", host.veth, "netns", host.netns)
        _ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", host.veth)
        _ip("-n", host.netns, "link", "set", "lo", "up")
        _ip("-n", host.netns, "link", "set", host.veth, "up")
        _ip("-n", host.netns, "route", "add", "default", "via", self.gateway)
        return host

    def start(self, host: Host, argv: list[str], *, log: Path, env: dict | None = None,
              cwd: Path | None = None) -> subprocess.Popen:  # fmt: skip
        """Start ``argv`` inside the host's namespace, in a process group of its own."""
        out = open(log, "ab")
        proc = subprocess.Popen(
            host.exec_argv(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        out.close()
        self.procs.append(proc)
        return proc

    def run(self, host: Host, argv: list[str], *, env: dict | None = None,
            cwd: Path | None = None, timeout: float = 300) -> str:  # fmt: skip
        done = subprocess.run(
            host.exec_argv(argv), capture_output=True, text=True, env=env, cwd=cwd,
            timeout=timeout,
        )  # fmt: skip
        if done.returncode != 0:
            raise AssertionError(
                f"{' '.join(argv)} on {host.name} exited {done.returncode}:\n"
                f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
            )
        return done.stdout

    def cut(self, host: Host) -> None:
        """Take the host's only link down, from inside its namespace."""
        _ip("-n", host.netns, "link", "set", host.veth, "down")

    def reconnect(self, host: Host) -> None:
        _ip("-n", host.netns, "link", "set", host.veth, "up")
        _ip("-n", host.netns, "route", "replace", "default", "via", self.gateway)

    def stop(self, proc: subprocess.Popen, sig: int = signal.SIGTERM, wait: float = 20) -> None:
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, sig)
            proc.wait(timeout=wait)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    def close(self) -> None:
        for proc in reversed(self.procs):
            self.stop(proc, wait=10)
        for host in self.hosts.values():
            _ip("netns", "del", host.netns, check=False)
        _ip("link", "del", self.bridge, check=False)


def _free_prefix() -> str:
    """A /24 under 10.213/16 that no interface of this machine uses yet."""
    used = _ip("-4", "-o", "addr", "show").stdout + _ip("-4", "route", "show").stdout
    start = os.getpid() % 250
    for k in range(250):
        prefix = f"10.213.{(start + k) % 250 + 1}"
        if f"{prefix}." not in used:
            return prefix
    raise RuntimeError("no free /24 under 10.213.0.0/16 for the test network")
