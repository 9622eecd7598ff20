"""The filtering proxy sandboxed commands reach the network through (SBX-4).

`FilteringProxy` runs on the host for the life of a runtime and checks every connection
against a `ConnectGate` (the ``tools.network`` allow-list of ``web_fetch``); `proxy_env` is the
environment that points a command's programs at it; the `forwarder` module is the small
program that, inside a bubblewrap sandbox without a network, hands the proxy a listening
socket on the sandbox's loopback (through the proxy's Unix socket) and becomes the command.
"""

from __future__ import annotations

from soong_agent.adapters.netproxy.env import proxy_env
from soong_agent.adapters.netproxy.handler import ConnectGate
from soong_agent.adapters.netproxy.server import FilteringProxy, ProxyAddress
from soong_agent.adapters.netproxy.sessions import UNKNOWN_COMMAND

__all__ = [
    "UNKNOWN_COMMAND",
    "ConnectGate",
    "FilteringProxy",
    "ProxyAddress",
    "proxy_env",
]
