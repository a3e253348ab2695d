"""A subscriber on a test host: the acceptance tier's ``Receiver`` bound to the host's own address, every
request it records written to stdout as one JSON line (the test reads them back as ``Delivery`` objects).

Run inside a namespace (``ip netns exec tk-hN python -m tests.cluster.sink ADDRESS PORT``): pollers on other
hosts reach it over the test bridge, so a partition between a poller and Cassandra leaves this path open
and a fenced node that still delivered would be seen. Each line carries the sender's address, which names
the poller node that sent it. Answers 200 to every well-formed delivery. Stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import signal
import sys

from tests.acceptance.harness import Delivery, Receiver

READY = "sink_ready"


def line(delivery: Delivery) -> str:
    fields = dataclasses.asdict(delivery)
    fields.pop("body")
    return json.dumps(fields, separators=(",", ":"))


async def serve(host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    receiver = await Receiver(host, port, on_delivery=lambda d: print(line(d), flush=True)).start()
    print(json.dumps({"event": READY, "url": receiver.endpoint("hook")}), flush=True)
    try:
        await stop.wait()
    finally:
        await receiver.close()


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not argv[1].isdigit():
        print("usage: python -m tests.cluster.sink ADDRESS PORT", file=sys.stderr)
        return 2
    asyncio.run(serve(argv[0], int(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
