#!/usr/bin/env python3
"""Test hosts on one machine: network namespaces ``tk-h1..tk-hN`` on a bridge, each with its own address.

Layout (root namespace):  bridge ``tkbr0`` 10.213.0.1/24, and per host a veth pair whose root end
``tkv-hN`` is a bridge port and whose other end is ``eth0`` inside namespace ``tk-hN`` with 10.213.0.(10+N)/24,
``lo`` up, default route via 10.213.0.1. Processes in the root namespace reach every host's address; a
host reaches the others and the root's 10.213.0.1, nothing else (no forwarding, no NAT).

Faults, per host (both need only iproute2; this kernel has no netem, no tc classifiers, no iptables):
- ``cut --mode blackhole`` (default): a ``blackhole`` qdisc on both veth ends, so every packet to or from
  the host vanishes silently, as on a real partition (peers see timeouts, never a reset);
- ``cut --mode down``: the root end of the veth set down (the host sees no carrier, the bridge no port).
``heal`` undoes either. ``partition N M..`` cuts only the links between host N and hosts M.. (a
``blackhole`` route to the other's address in both namespaces), so N still reaches everyone else; ``join N``
undoes it. ``down`` stops every process left in the namespaces (TERM, then KILL) and deletes
every namespace and link named with our prefixes, so it also cleans up after a crashed test.

Standard library only (like infra.py), needs root. Usable as a module (``import hosts`` with this
directory on sys.path) or by hand: ``python3 deploy/local/hosts.py up 3``, ``exec 2 -- ip addr``, ...
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

BRIDGE = "tkbr0"
NETNS_PREFIX = "tk-h"  # namespaces tk-h1..tk-hN
VETH_PREFIX = "tkv-h"  # root ends of the veth pairs: tkv-h1..
PEER_PREFIX = "tkp-h"  # the other end's name until it is moved into its namespace and renamed eth0
SUBNET = "10.213.0"
GATEWAY = f"{SUBNET}.1"
PREFIX_LEN = 24
MAX_HOSTS = 89  # addresses 10.213.0.11 .. 10.213.0.99
IP_TIMEOUT_S = 15.0
STOP_GRACE_S = 10.0
NETNS_RE = re.compile(rf"^{re.escape(NETNS_PREFIX)}(\d+)$")
LINK_RE = re.compile(rf"^(?:{re.escape(VETH_PREFIX)}|{re.escape(PEER_PREFIX)})\d+$")


class HostsError(Exception):
    """A command failed; the message names it and carries its stderr."""


@dataclass(frozen=True)
class Host:
    """One test host: a network namespace with one address on the test bridge."""

    index: int

    @property
    def netns(self) -> str:
        return f"{NETNS_PREFIX}{self.index}"

    @property
    def address(self) -> str:
        return f"{SUBNET}.{10 + self.index}"

    @property
    def veth(self) -> str:
        """The veth end in the root namespace (a port of the bridge)."""
        return f"{VETH_PREFIX}{self.index}"

    def argv(self, command: list[str]) -> list[str]:
        """``command`` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.netns, *command]


def host(index: int) -> Host:
    if not 1 <= index <= MAX_HOSTS:
        raise HostsError(f"host index must be 1..{MAX_HOSTS}, got {index}")
    return Host(index)


# --------------------------------------------------------------------------- commands


def run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run one short command with a deadline; raise HostsError with its stderr when it fails and ``check``."""
    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise HostsError(f"timed out after {IP_TIMEOUT_S:.0f} s: {' '.join(argv)}") from None
    except FileNotFoundError:
        raise HostsError(f"{argv[0]} not found on PATH (iproute2 is needed)") from None
    if check and result.returncode != 0:
        raise HostsError(f"`{' '.join(argv)}` failed ({result.returncode}): {result.stderr.strip()}")
    return result


def in_netns(item: Host, command: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(item.argv(command), check=check)


def require_root() -> None:
    if os.geteuid() != 0:
        raise HostsError("network namespaces need root (run as root or with sudo)")


# --------------------------------------------------------------------------- what exists


def namespaces() -> list[str]:
    """Our namespaces (``tk-h<digits>``) that exist now."""
    out = run(["ip", "netns", "list"]).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return sorted((n for n in names if NETNS_RE.match(n)), key=lambda n: int(NETNS_RE.match(n).group(1)))  # type: ignore[union-attr]


def links() -> list[str]:
    """Our links in the root namespace: the bridge and the veth ends named with our prefixes."""
    out = run(["ip", "-o", "link", "show"]).stdout
    found = []
    for line in out.splitlines():
        name = line.split(":", 2)[1].strip().split("@", 1)[0]
        if name == BRIDGE or LINK_RE.match(name):
            found.append(name)
    return found


def existing_hosts() -> list[Host]:
    return [Host(int(NETNS_RE.match(n).group(1))) for n in namespaces()]  # type: ignore[union-attr]


def netns_pids(netns: str) -> list[int]:
    out = run(["ip", "netns", "pids", netns], check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def is_cut(item: Host) -> str | None:
    """``blackhole`` or ``down`` when the host is cut off, else None."""
    link = run(["ip", "-o", "link", "show", item.veth], check=False).stdout
    if not link:
        return None
    if "state DOWN" in link or ",UP" not in link.split(">", 1)[0] + ",":
        return "down"
    qdisc = run(["tc", "qdisc", "show", "dev", item.veth], check=False).stdout
    return "blackhole" if "blackhole" in qdisc else None


# --------------------------------------------------------------------------- making and removing


def ensure_bridge() -> None:
    if BRIDGE not in links():
        run(["ip", "link", "add", BRIDGE, "type", "bridge"])
    addrs = run(["ip", "-o", "-4", "addr", "show", "dev", BRIDGE]).stdout
    if f"{GATEWAY}/{PREFIX_LEN}" not in addrs:
        run(["ip", "addr", "add", f"{GATEWAY}/{PREFIX_LEN}", "dev", BRIDGE])
    run(["ip", "link", "set", BRIDGE, "up"])


def host_ready(item: Host) -> bool:
    """True when the namespace exists with eth0 holding its address and the veth end is on the bridge."""
    if item.netns not in namespaces() or item.veth not in links():
        return False
    addrs = in_netns(item, ["ip", "-o", "-4", "addr", "show", "dev", "eth0"], check=False).stdout
    master = run(["ip", "-o", "link", "show", item.veth], check=False).stdout
    return f"{item.address}/{PREFIX_LEN}" in addrs and f"master {BRIDGE}" in master


def create_host(item: Host) -> None:
    """Make one host from nothing (anything half-made under its names is removed first)."""
    remove_host(item)
    peer = f"{PEER_PREFIX}{item.index}"
    run(["ip", "netns", "add", item.netns])
    run(["ip", "link", "add", item.veth, "type", "veth", "peer", "name", peer])
    run(["ip", "link", "set", peer, "netns", item.netns])
    in_netns(item, ["ip", "link", "set", peer, "name", "eth0"])
    in_netns(item, ["ip", "link", "set", "lo", "up"])
    in_netns(item, ["ip", "addr", "add", f"{item.address}/{PREFIX_LEN}", "dev", "eth0"])
    in_netns(item, ["ip", "link", "set", "eth0", "up"])
    in_netns(item, ["ip", "route", "add", "default", "via", GATEWAY])
    run(["ip", "link", "set", item.veth, "master", BRIDGE])
    run(["ip", "link", "set", item.veth, "up"])


def ensure(count: int) -> list[Host]:
    """Hosts 1..count exist and are healed; ones already correct are kept (with whatever runs in them)."""
    require_root()
    if not 1 <= count <= MAX_HOSTS:
        raise HostsError(f"host count must be 1..{MAX_HOSTS}, got {count}")
    ensure_bridge()
    made = []
    for index in range(1, count + 1):
        item = Host(index)
        if host_ready(item):
            heal(item)
            join(item)
        else:
            create_host(item)
        made.append(item)
    return made


def stop_pids(pids: list[int], grace_s: float = STOP_GRACE_S) -> list[int]:
    """TERM, wait up to ``grace_s``, KILL; return pids still alive after that."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        alive = [pid for pid in pids if _alive(pid)]
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while any(_alive(pid) for pid in alive) and time.monotonic() < deadline:
            time.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def remove_host(item: Host) -> None:
    """Stop what runs in the host, delete its namespace and its veth end; quiet when already gone."""
    if item.netns in namespaces():
        left = stop_pids(netns_pids(item.netns))
        if left:
            raise HostsError(f"{item.netns}: pid(s) {left} survived SIGKILL")
        run(["ip", "netns", "delete", item.netns])
    names = (item.veth, f"{PEER_PREFIX}{item.index}")
    deadline = time.monotonic() + IP_TIMEOUT_S
    while left := [name for name in links() if name in names]:
        # Deleting the namespace deletes the pair too, but asynchronously: a delete may race it.
        for name in left:
            run(["ip", "link", "delete", name], check=False)
        if time.monotonic() > deadline:
            raise HostsError(f"link(s) {left} are still there after {IP_TIMEOUT_S:.0f} s")
        time.sleep(0.05)


def teardown() -> list[str]:
    """Remove every namespace and link with our names (whatever made them); return what was removed."""
    require_root()
    removed = []
    for item in existing_hosts():
        remove_host(item)
        removed.append(item.netns)
    for name in links():
        if name != BRIDGE:
            run(["ip", "link", "delete", name], check=False)
            removed.append(name)
    if BRIDGE in links():
        run(["ip", "link", "delete", BRIDGE])
        removed.append(BRIDGE)
    return removed


# --------------------------------------------------------------------------- faults


def cut(item: Host, mode: str = "blackhole") -> None:
    """Cut the host off the bridge: ``blackhole`` drops every packet silently, ``down`` drops the link."""
    heal(item)
    if mode == "blackhole":
        run(["tc", "qdisc", "replace", "dev", item.veth, "root", "blackhole"])
        in_netns(item, ["tc", "qdisc", "replace", "dev", "eth0", "root", "blackhole"])
    elif mode == "down":
        run(["ip", "link", "set", item.veth, "down"])
    else:
        raise HostsError(f"unknown cut mode {mode!r} (blackhole or down)")


def heal(item: Host) -> None:
    """Undo ``cut`` (either mode); a no-op on a healthy host."""
    for prefix, dev in (([], item.veth), (item.argv([]), "eth0")):
        if "blackhole" in run([*prefix, "tc", "qdisc", "show", "dev", dev], check=False).stdout:
            run([*prefix, "tc", "qdisc", "del", "dev", dev, "root"])
    run(["ip", "link", "set", item.veth, "up"])


def blackholed(item: Host) -> list[str]:
    """Addresses the host's own routing table drops (``partition``), sorted."""
    out = in_netns(item, ["ip", "-4", "route", "show", "type", "blackhole"], check=False).stdout
    return sorted(line.split()[1].split("/")[0] for line in out.splitlines() if line.startswith("blackhole "))


def partition(item: Host, others: list[Host]) -> None:
    """Cut the link between ``item`` and each of ``others`` only, both ways: a ``blackhole`` route to the
    other's address in each namespace, so packets between the two are dropped (a sender in either gets an
    error on a new connection, an open connection goes silent) while both still reach everyone else."""
    if any(other.index == item.index for other in others):  # refused before any route is added
        raise HostsError(f"{item.netns} cannot be partitioned from itself")
    for other in others:
        in_netns(item, ["ip", "route", "replace", "blackhole", f"{other.address}/32"])
        in_netns(other, ["ip", "route", "replace", "blackhole", f"{item.address}/32"])


def join(item: Host) -> None:
    """Undo every ``partition`` of ``item``: its blackhole routes, and every other host's route to it."""
    for address in blackholed(item):
        in_netns(item, ["ip", "route", "del", "blackhole", f"{address}/32"])
    for other in existing_hosts():
        if other.index != item.index and item.address in blackholed(other):
            in_netns(other, ["ip", "route", "del", "blackhole", f"{item.address}/32"])


# --------------------------------------------------------------------------- command line


def cmd_up(args: argparse.Namespace) -> int:
    for item in ensure(args.count):
        print(f"{item.netns}: {item.address}")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    removed = teardown()
    print("removed: " + (", ".join(removed) if removed else "nothing"))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    items = existing_hosts()
    if not items:
        print("no test hosts")
    for item in items:
        state = "ready" if host_ready(item) else "BROKEN (run up again)"
        cut_mode = is_cut(item)
        pids = netns_pids(item.netns)
        dropped = blackholed(item)
        print(
            f"{item.netns}: {item.address} {state}{f', CUT ({cut_mode})' if cut_mode else ''}"
            f"{f', no route to {dropped}' if dropped else ''}, pids {pids or '-'}"
        )
    return 0


def cmd_exec(args: argparse.Namespace) -> int:
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        raise HostsError("exec needs a command after the host")
    return subprocess.call(host(args.host).argv(command))


def cmd_cut(args: argparse.Namespace) -> int:
    cut(host(args.host), args.mode)
    return 0


def cmd_heal(args: argparse.Namespace) -> int:
    heal(host(args.host))
    return 0


def cmd_partition(args: argparse.Namespace) -> int:
    partition(host(args.host), [host(other) for other in args.others])
    return 0


def cmd_join(args: argparse.Namespace) -> int:
    join(host(args.host))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    up = sub.add_parser("up", help="make (or repair) hosts 1..COUNT; keeps healthy ones")
    up.add_argument("count", type=int, nargs="?", default=3)
    up.set_defaults(func=cmd_up)
    sub.add_parser("down", help="stop what runs in them and remove every tk-h* namespace and link").set_defaults(
        func=cmd_down
    )
    sub.add_parser("status", help="list the hosts, whether they are cut, their pids").set_defaults(func=cmd_status)
    run_in = sub.add_parser("exec", help="run a command in host N: exec 2 -- ip addr")
    run_in.add_argument("host", type=int)
    run_in.add_argument("command", nargs=argparse.REMAINDER)
    run_in.set_defaults(func=cmd_exec)
    cut_off = sub.add_parser("cut", help="cut host N off the network (blackhole: silent drops; down: no link)")
    cut_off.add_argument("host", type=int)
    cut_off.add_argument("--mode", choices=("blackhole", "down"), default="blackhole")
    cut_off.set_defaults(func=cmd_cut)
    mend = sub.add_parser("heal", help="undo cut on host N")
    mend.add_argument("host", type=int)
    mend.set_defaults(func=cmd_heal)
    split = sub.add_parser("partition", help="cut only the links between host N and hosts M.. (both ways)")
    split.add_argument("host", type=int)
    split.add_argument("others", type=int, nargs="+")
    split.set_defaults(func=cmd_partition)
    rejoin = sub.add_parser("join", help="undo every partition of host N")
    rejoin.add_argument("host", type=int)
    rejoin.set_defaults(func=cmd_join)
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except HostsError as exc:
        print(f"hosts.py {args.cmd}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
