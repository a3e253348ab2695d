#!/usr/bin/env python3
"""A three-node Cassandra 5.0 cluster on test hosts (network namespaces made by hosts.py), for failure tests.

Node i runs in namespace ``tk-hi`` and listens on its address 10.213.0.(10+i), CQL 9042, storage 7000,
from the same jars, the same JVM flags and the same cassandra.yaml template as infra.py's single node
(only the cluster keys are replaced: name, tokens, seeds, addresses). One data centre (``datacenter1``,
SimpleSnitch), node 1 is the seed, ``num_tokens: 1`` with balanced initial tokens, ``auto_bootstrap:
false``, so all nodes start at once. State, logs and pid files per node under
``<repo>/.cache/infra/cluster/node<i>/`` (``server.log`` like the single node's). Nothing here touches the
single node on 127.0.0.1.

``up`` waits until every node logs ``Startup complete``, answers a CQL OPTIONS frame on its address, and has
logged every other node as UP. Then point tickd at it with the variables ``env`` prints (replication factor 3,
LOCAL_QUORUM / LOCAL_SERIAL) and run ``tickd-migrate``. Standard library only, needs root (namespaces).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import signal
import sys
import time
from pathlib import Path

# Siblings, not a package: importable from tests too, whatever the working directory.
sys.path.insert(0, str(Path(__file__).resolve().parent))

import hosts
import infra

DATA_CENTRE = "datacenter1"  # SimpleSnitch's only data centre
CLUSTER_NAME = "tickd-cluster"
CQL_PORT = 9042
STORAGE_PORT = 7000
DEFAULT_NODES = 3
DEFAULT_HEAP = "512M"
MIN_TOKEN = -(2**63)
PEER_LINE = re.compile(rb"InetAddress /([0-9.]+):\d+ is now (UP|DOWN)")
# The single-node template's keys this file replaces; each must be present exactly once.
REPLACED_KEYS = ("cluster_name", "num_tokens", "listen_address", "rpc_address")


def say(message: str) -> None:
    infra.say(message)


@dataclasses.dataclass(frozen=True)
class ClusterSettings:
    """TICKD_CLUSTER_NODES (3), TICKD_CLUSTER_HEAP (512M) and infra.py's own settings (jars dir, timeout)."""

    base: infra.Settings
    nodes: int
    heap: str

    @property
    def state_dir(self) -> Path:
        return self.base.infra_dir / "cluster"

    @classmethod
    def from_env(cls) -> ClusterSettings:
        base = infra.Settings.from_env()
        nodes = infra._env_int("TICKD_CLUSTER_NODES", DEFAULT_NODES)
        if not 1 <= nodes <= 9:
            raise infra.InfraError(f"TICKD_CLUSTER_NODES must be 1..9, got {nodes}")
        heap = os.environ.get("TICKD_CLUSTER_HEAP", "").strip() or DEFAULT_HEAP
        node_base = dataclasses.replace(
            base, cassandra_port=CQL_PORT, cassandra_storage_port=STORAGE_PORT, cassandra_heap=heap
        )
        return cls(base=node_base, nodes=nodes, heap=heap)


def initial_token(index: int, count: int) -> int:
    """Balanced single tokens, as ccm gives them: node i owns an equal share of the Murmur3 ring."""
    return MIN_TOKEN + (index - 1) * (2**64 // count)


class Node(infra.Cassandra):
    """One cluster node: infra.py's Cassandra, in a namespace, on that namespace's address."""

    def __init__(self, settings: ClusterSettings, index: int) -> None:
        super().__init__(settings.base)
        self.index = index
        self.count = settings.nodes
        self.host = hosts.host(index)
        self.name = f"node{index}"
        self.state_dir = settings.state_dir / self.name

    @property
    def address(self) -> str:
        return self.host.address

    @property
    def lib_dir(self) -> Path:
        return self.settings.jars_dir / "cassandra"

    def prepare(self) -> None:
        super().prepare()  # the single node's yaml and logback.xml, written into this node's state dir
        yaml = self.config_file.read_text(encoding="utf-8")
        infra.write_text(self.config_file, cluster_yaml(yaml, self.address, self.index, self.count))

    def command(self) -> list[str]:
        return self.host.argv(super().command())

    def probe(self) -> str:
        supported = infra.cql_supported(self.port, host=self.address)
        return f"CQL {','.join(supported.get('CQL_VERSION', ['?']))} on {self.address}:{self.port}"

    def peers(self) -> dict[str, str]:
        """Each other node's last state (UP or DOWN) in this node's current log."""
        try:
            data = self.log_file.read_bytes()
        except OSError:
            return {}
        return {m.group(1).decode(): m.group(2).decode() for m in PEER_LINE.finditer(data)}


def cluster_yaml(single: str, address: str, index: int, count: int) -> str:
    """The single node's cassandra.yaml with the keys of a cluster member replaced."""
    values = {
        "cluster_name": CLUSTER_NAME,
        "num_tokens": "1",
        "listen_address": address,
        "rpc_address": address,
    }
    text = single
    for key in REPLACED_KEYS:
        text, found = re.subn(rf"(?m)^{key}:.*$", f"{key}: {values[key]}", text)
        if found != 1:
            raise infra.InfraError(f"templates/cassandra.yaml has {found} `{key}:` lines, expected 1")
    seed = f"{hosts.host(1).address}:{STORAGE_PORT}"
    text, found = re.subn(r"(?m)^(\s*- seeds:\s*).*$", rf'\g<1>"{seed}"', text)
    if found != 1:
        raise infra.InfraError(f"templates/cassandra.yaml has {found} `- seeds:` lines, expected 1")
    header = f"# Node {index} of {count} of the local test cluster (generated by deploy/local/cluster.py).\n"
    return header + text + f"initial_token: {initial_token(index, count)}\n"


def all_nodes(settings: ClusterSettings) -> list[Node]:
    return [Node(settings, index) for index in range(1, settings.nodes + 1)]


def node_of(settings: ClusterSettings, index: int) -> Node:
    if not 1 <= index <= settings.nodes:
        raise infra.InfraError(f"node must be 1..{settings.nodes}, got {index}")
    return Node(settings, index)


# --------------------------------------------------------------------------- starting


def start_or_reuse(node: Node) -> infra.Pending | None:
    """infra.start_or_reuse, but the ports checked are on the node's own address."""
    infra.make_dir(node.state_dir)
    pid = node.live_pid()
    if pid is not None:
        description = node.answers()
        if description:
            say(f"{node.name}: reusing pid {pid} ({description})")
            return None
        say(f"{node.name}: pid {pid} is alive but not answering yet, waiting for it")
        return infra.Pending(node, pid, proc=None)
    node.clear_pid_file()
    busy = [port for port in node.bound_ports if infra.port_open(port, host=node.address)]
    if busy:
        raise infra.StartFailure(node, f"port(s) {busy} on {node.address} in use by a process not ours", False)
    node.rotate_log()
    node.prepare()
    proc = node.spawn()
    say(f"{node.name}: started pid {proc.pid} in {node.host.netns} ({node.address}), waiting ...")
    return infra.Pending(node, proc.pid, proc)


def wait_ring(nodes: list[Node], deadline: float) -> None:
    """Until every node has logged every other live node as UP (gossip has met), or the deadline."""
    want = {node.address for node in nodes}
    while True:
        missing = {node.name: sorted(a for a in want - {node.address} if node.peers().get(a) != "UP") for node in nodes}
        missing = {name: addrs for name, addrs in missing.items() if addrs}
        if not missing:
            return
        if time.monotonic() > deadline:
            raise infra.InfraError(f"gossip incomplete: nodes do not see {missing} as UP")
        time.sleep(infra.POLL_S)


def start(settings: ClusterSettings, nodes: list[Node]) -> int:
    """Start (or reuse) ``nodes`` at once and wait for each to answer and for the ring to meet."""
    began = time.monotonic()
    pending: list[infra.Pending] = []
    try:
        for node in nodes:
            item = start_or_reuse(node)
            if item is not None:
                pending.append(item)
        infra.wait_all(list(pending))
        wait_ring(all_live(settings), began + settings.base.cassandra_timeout_s)
    except infra.StartFailure as failure:
        infra.report_failure(failure)
        infra.abort_started(pending)
        return 1
    except BaseException:
        infra.abort_started(pending)
        raise
    say(f"cluster: {len(nodes)} node(s) ready and gossiping in {time.monotonic() - began:.1f} s")
    return 0


def all_live(settings: ClusterSettings) -> list[Node]:
    return [node for node in all_nodes(settings) if node.live_pid() is not None]


def fetch_cassandra(settings: ClusterSettings) -> None:
    infra.require_tools("java", "mvn", "ip")
    pom = infra.MAVEN_POMS / "cassandra" / "pom.xml"
    if not infra.jars_current(settings.base.jars_dir / "cassandra", pom):
        infra.make_dir(settings.base.jars_dir)
        infra.copy_jars("cassandra", settings.base.jars_dir)


# --------------------------------------------------------------------------- stopping


def stop(nodes: list[Node], sig: signal.Signals = signal.SIGTERM) -> bool:
    """SIGTERM (Cassandra drains) then SIGKILL after the grace, or SIGKILL at once; True when all are gone."""
    targets: dict[int, Node] = {}
    for node in nodes:
        for pid in [node.live_pid(), *infra.processes_mentioning(str(node.config_file))]:
            if pid is not None:
                targets[pid] = node
    if not targets:
        return True
    say("stopping " + ", ".join(f"{n.name} (pid {pid})" for pid, n in targets.items()) + f" with {sig.name}")
    if sig == signal.SIGKILL:
        for pid in targets:
            infra.signal_process(pid, sig)
        survivors = infra.wait_gone(list(targets), 10.0)
    else:
        survivors = infra.stop_processes(list(targets))
    for node in nodes:
        node.clear_pid_file()
    return not survivors


# --------------------------------------------------------------------------- subcommands


def cmd_up(settings: ClusterSettings, args: argparse.Namespace) -> int:
    """Make the hosts, start every node at once (reusing live ones), wait until all answer and see each other."""
    fetch_cassandra(settings)
    with infra.infra_lock(settings.state_dir):
        for item in hosts.ensure(settings.nodes):
            say(f"host {item.netns}: {item.address}")
        code = start(settings, all_nodes(settings))
    if code == 0:
        print(env_text(settings))
    return code


def cmd_down(settings: ClusterSettings, args: argparse.Namespace) -> int:
    """Stop every node (SIGTERM, SIGKILL after 30 s), then remove the test hosts."""
    with infra.infra_lock(settings.state_dir):
        stopped = stop(all_nodes(settings))
        removed = hosts.teardown()
    say("hosts removed: " + (", ".join(removed) if removed else "none"))
    return 0 if stopped else 1


def cmd_status(settings: ClusterSettings, args: argparse.Namespace) -> int:
    """One line per node: process, CQL answer, which peers it sees UP, cut or not; exit 0 when all answer."""
    ok = True
    for node in all_nodes(settings):
        pid = node.live_pid()
        answer = node.answers() if pid is not None else None
        ok = ok and answer is not None
        peers = ", ".join(f"{a} {s}" for a, s in sorted(node.peers().items())) if pid is not None else "-"
        cut = hosts.is_cut(node.host) if node.host.netns in hosts.namespaces() else None
        state = f"pid {pid}" if pid is not None else "not running"
        print(
            f"{node.name} {node.address}: {state}; {answer or 'no CQL answer'}; peers: {peers or '-'}"
            f"{f'; CUT ({cut})' if cut else ''}  [log: {node.log_file}]"
        )
    return 0 if ok else 1


def cmd_start(settings: ClusterSettings, args: argparse.Namespace) -> int:
    """Start one node again (after stop or kill) and wait until it answers and the ring has met."""
    with infra.infra_lock(settings.state_dir):
        hosts.ensure(settings.nodes)
        return start(settings, [node_of(settings, args.node)])


def cmd_stop(settings: ClusterSettings, args: argparse.Namespace) -> int:
    """Stop one node cleanly (SIGTERM: Cassandra drains), SIGKILL after 30 s."""
    return 0 if stop([node_of(settings, args.node)]) else 1


def cmd_kill(settings: ClusterSettings, args: argparse.Namespace) -> int:
    """kill -9 one node (no drain: a crash)."""
    return 0 if stop([node_of(settings, args.node)], signal.SIGKILL) else 1


def cmd_cut(settings: ClusterSettings, args: argparse.Namespace) -> int:
    """Cut one node's host off the network (the process keeps running)."""
    hosts.cut(node_of(settings, args.node).host, args.mode)
    return 0


def cmd_heal(settings: ClusterSettings, args: argparse.Namespace) -> int:
    """Undo cut for one node's host."""
    hosts.heal(node_of(settings, args.node).host)
    return 0


def cmd_wipe(settings: ClusterSettings, args: argparse.Namespace) -> int:
    """down, then delete every node's data (the next up makes a fresh cluster)."""
    code = cmd_down(settings, args)
    for node in all_nodes(settings):
        node.wipe_data()
    say(f"data removed under {settings.state_dir}")
    return code


def env_vars(settings: ClusterSettings) -> dict[str, str]:
    """What tickd (schema.settings.StoreSettings) needs to use this cluster, replication factor 3."""
    return {
        "TICKD_CASSANDRA_HOSTS": ",".join(hosts.host(i).address for i in range(1, settings.nodes + 1)),
        "TICKD_CASSANDRA_PORT": str(CQL_PORT),
        "TICKD_CASSANDRA_LOCAL_DC": DATA_CENTRE,
        "TICKD_REPLICATION": f"NetworkTopologyStrategy:{DATA_CENTRE}={min(3, settings.nodes)}",
        "TICKD_CONSISTENCY": "LOCAL_QUORUM",
        "TICKD_SERIAL_CONSISTENCY": "LOCAL_SERIAL",
    }


def env_text(settings: ClusterSettings) -> str:
    return "\n".join(f"export {k}={v}" for k, v in env_vars(settings).items())


def cmd_env(settings: ClusterSettings, args: argparse.Namespace) -> int:
    """Print the TICKD_* exports that point tickd at the cluster (eval "$(cluster.py env)")."""
    print(env_text(settings))
    return 0


COMMANDS = {
    "up": cmd_up,
    "down": cmd_down,
    "status": cmd_status,
    "env": cmd_env,
    "start": cmd_start,
    "stop": cmd_stop,
    "kill": cmd_kill,
    "cut": cmd_cut,
    "heal": cmd_heal,
    "wipe": cmd_wipe,
}
NODE_COMMANDS = {"start", "stop", "kill", "cut", "heal"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, func in COMMANDS.items():
        command = sub.add_parser(name, help=(func.__doc__ or "").splitlines()[0])
        if name in NODE_COMMANDS:
            command.add_argument("node", type=int, help="node number, 1..TICKD_CLUSTER_NODES")
        if name == "cut":
            command.add_argument("--mode", choices=("blackhole", "down"), default="blackhole")
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](ClusterSettings.from_env(), args)
    except (infra.InfraError, hosts.HostsError) as exc:
        print(f"cluster.py {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
