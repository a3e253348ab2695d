"""structlog, configured once per process by its entry point.

JSON lines when ``TICKD_LOG_FORMAT=json`` (production), readable key=value in a terminal otherwise.
Event names are stable snake_case (``schedule_created``, ``instance_claimed``); ids are bound with
``structlog.contextvars`` at boundaries (request, poller instance).
"""

from __future__ import annotations

import logging
import os
import sys
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


class _IntoStructlog(logging.Handler):
    """Forwards standard-library records to structlog, so every line has one format and one writer."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a malformed foreign log call must not take the process down
            message = str(record.msg)
        structlog.get_logger(record.name).log(record.levelno, message, logger=record.name)
