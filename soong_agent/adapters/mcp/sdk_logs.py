"""Filters on the `mcp` SDK's own loggers: the hub reports what they would, scrubbed and once."""

from __future__ import annotations

import logging


class _ParseErrorFilter(logging.Filter):
    """Drops the SDK's own report of a stdout line that is not JSON-RPC: it is logged with a
    traceback quoting the line unscrubbed, while the hub reports it (scrubbed) as the server's
    health or a warning of its own."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != "Failed to parse JSONRPC message from server"


class _TransportFailureFilter(logging.Filter):
    """Drops the SDK's report of a failed HTTP or SSE transport or OAuth flow (an error with a
    traceback the user never asked for): the hub reports the failure itself, once, as the
    server's health and a one-line warning."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR


_HTTP_CLIENT_LOGGERS = ("mcp.client.sse", "mcp.client.streamable_http", "mcp.client.auth.oauth2")


def install_sdk_log_filters() -> None:
    sdk_logger = logging.getLogger("mcp.client.stdio")
    if not any(isinstance(item, _ParseErrorFilter) for item in sdk_logger.filters):
        sdk_logger.addFilter(_ParseErrorFilter())
    for name in _HTTP_CLIENT_LOGGERS:
        http_logger = logging.getLogger(name)
        if not any(isinstance(item, _TransportFailureFilter) for item in http_logger.filters):
            http_logger.addFilter(_TransportFailureFilter())
