"""``tickd-api``: read settings, configure logging, serve until SIGTERM/SIGINT (graceful stop)."""

from __future__ import annotations

import structlog
from aiohttp import web

from tickd.schema import eventloop, logs, tracing
from tickd.schema.errors import ConfigError, StoreUnavailable
from tickd.schema.settings import StoreSettings
from tickd.service.app import create_app
from tickd.service.settings import ApiSettings

# In-flight requests get this long to finish after SIGTERM before connections are closed.
_SHUTDOWN_TIMEOUT_S = 10.0


def main() -> None:
    logs.configure()
    log = structlog.get_logger("tickd.api")
    try:
        settings = ApiSettings.from_env()
        store_settings = StoreSettings.from_env()
        factory = eventloop.loop_factory()
        eventloop.favour_the_loop()
        tracing.setup("tickd-api")
    except ConfigError as exc:
        log.error("config_invalid", error=exc.message, variable=exc.field)
        raise SystemExit(2) from None
    if settings.admin_token is None:
        log.warning("admin_disabled", reason="TICKD_ADMIN_TOKEN is not set; admin endpoints answer 503")
    log.info("api_starting", host=settings.host, port=settings.port, keyspace=store_settings.keyspace)
    # run_app handles SIGINT and SIGTERM: stop accepting, finish in-flight requests, run cleanup_ctx.
    try:
        web.run_app(
            create_app(settings, store_settings=store_settings),
            host=settings.host,
            port=settings.port,
            access_log=None,  # metrics and structlog events instead of a line per request
            shutdown_timeout=_SHUTDOWN_TIMEOUT_S,
            print=None,
            loop=factory(),
        )
    except ConfigError as exc:  # Cassandra refused the credentials or certificates at start
        log.error("api_failed", error=exc.message, variable=exc.field)
        raise SystemExit(2) from None
    except StoreUnavailable as exc:
        log.error("api_failed", error=str(exc))
        raise SystemExit(1) from None
    except OSError as exc:  # a listen address taken or not ours (the API's or the metrics listener's)
        log.error("api_failed", error=str(exc))
        raise SystemExit(1) from None
    log.info("api_stopped")


if __name__ == "__main__":
    main()
