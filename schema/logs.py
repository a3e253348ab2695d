"""structlog, configured once per process by its entry point.

JSON lines when ``TICKD_LOG_FORMAT=json`` (production), readable key=value in a terminal otherwise.
Event names are stable snake_case (``schedule_created``, ``instance_claimed``); ids are bound with
``structlog.contextvars`` at boundaries (request, poller instance).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Mapping

import structlog


def configure(env: Mapping[str, str] | None = None) -> None:
    env = os.environ if env is None else env
    level_name = env.get("TICKD_LOG_LEVEL", "INFO").upper()
    level = logging.getLevelNamesMapping().get(level_name, logging.INFO)
    as_json = env.get("TICKD_LOG_FORMAT", "console" if sys.stderr.isatty() else "json") == "json"
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        # One write per line under a lock: the driver's I/O thread logs too, and lines must not splice.
        logger_factory=structlog.WriteLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    # The driver and aiokafka log through the standard library: keep their warnings, rendered by the
    # same structlog pipeline (one JSON object per line), not their chatter.
    root = logging.getLogger()
    root.handlers[:] = [_IntoStructlog()]
    root.setLevel(logging.WARNING)
    protocol = logging.getLogger("cassandra.protocol")
    protocol.filters[:] = [f for f in protocol.filters if not isinstance(f, BatchSizeWarnings)]
    protocol.addFilter(BatchSizeWarnings())


class BatchSizeWarnings(logging.Filter):
    """Cassandra warns about every batch over its ``batch_size_warn_threshold`` (5 KiB by default), and the
    driver logs each server warning. tickd writes creates in groups up to ``TICKD_BATCH_MAX_BYTES`` (40 KiB)
    on purpose, under the fail threshold: a line per group was thousands of lines a minute (and 2% of the
    API's CPU in make bench-api). One line per ``every_s`` instead, with how many it stands for."""

    def __init__(self, every_s: float = 60.0) -> None:
        super().__init__()
        self._every_s = every_s
        self._lock = threading.Lock()  # the driver's I/O thread logs
        self._held = 0
        self._next = 0.0

    def filter(self, record: logging.LogRecord) -> bool:
        if not _is_batch_size_warning(record):
            return True
        with self._lock:
            self._held += 1
            now = time.monotonic()
            if now < self._next:
                return False
            self._next, held, self._held = now + self._every_s, self._held, 0
        record.msg = (
            "Cassandra warned of batch sizes %d times since the last such line (tickd groups creates up to "
            "TICKD_BATCH_MAX_BYTES; raise batch_size_warn_threshold, or lower TICKD_BATCH_MAX_BYTES to 5000 "
            "to stay under Cassandra's default): %s"
        )
        record.args = (held, *(record.args if isinstance(record.args, tuple) else ()))
        return True


def _is_batch_size_warning(record: logging.LogRecord) -> bool:
    args = record.args if isinstance(record.args, tuple) else ()
    return record.msg == "Server warning: %s" and any(
        isinstance(a, str) and a.startswith("Batch for ") and "exceeding specified threshold" in a for a in args
    )


class _IntoStructlog(logging.Handler):
    """Forwards standard-library records to structlog, so every line has one format and one writer."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a malformed foreign log call must not take the process down
            message = str(record.msg)
        structlog.get_logger(record.name).log(record.levelno, message, logger=record.name)
