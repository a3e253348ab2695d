"""Raw HTTP/1.1 requests for the hostile corpus: bytes the aiohttp client would refuse to send."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def error(self) -> Any:
        return json.loads(self.body)["error"]


def build(method: str, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes | None) -> bytes:
    lines = [method.encode() + b" " + target + b" HTTP/1.1", b"Host: tickd", b"Connection: close"]
    lines += [name + b": " + value for name, value in headers]
    if body is not None:
        lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


async def send(host: str, port: int, request: bytes, timeout_s: float = 5.0) -> RawResponse:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        async with asyncio.timeout(timeout_s):
            writer.write(request)
            await writer.drain()
            data = await reader.read()
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding") == "chunked":
        body = _unchunk(body)
    return RawResponse(int(status_line.split(" ")[1]), headers, body)


def _unchunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2 :]
    return out
