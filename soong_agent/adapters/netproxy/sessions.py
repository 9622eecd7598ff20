"""Which command a proxy connection belongs to (SBX-4): each command the runtime starts with the
proxy gets a token (the password of its proxy URL); the proxy serves only connections carrying
the token of a command of its runtime — running, or ended lately (a background command goes on
after its start) — and records each refusal for the command that asked."""

from __future__ import annotations

import itertools
import secrets
import threading
from dataclasses import dataclass, field

from soong_agent.ports.ossandbox import NetworkDenial

__all__ = ["UNKNOWN_COMMAND", "Sessions"]

UNKNOWN_COMMAND = "(a sandboxed command the proxy could not tell apart)"
ENDED_KEPT = 256
"""How many ended commands' tokens are still served (and their refusals named)."""


@dataclass(slots=True)
class _Session:
    command: str
    denials: list[NetworkDenial] = field(default_factory=list)


class Sessions:
    """The tokens of one proxy's commands (called from any thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._live: dict[str, _Session] = {}
        self._ended: dict[str, str] = {}
        self._unattributed: list[NetworkDenial] = []

    def open(self, command: str) -> str:
        """A token for one command (`command`: its text); its connections carry it."""
        token = f"c{next(self._ids)}-{secrets.token_hex(16)}"
        with self._lock:
            self._live[token] = _Session(command)
        return token

    def end(self, token: str) -> tuple[NetworkDenial, ...]:
        """The command of `token` ended: what the proxy refused it (in order)."""
        with self._lock:
            session = self._live.pop(token, None)
            if session is not None:
                self._ended[token] = session.command
                while len(self._ended) > ENDED_KEPT:
                    del self._ended[next(iter(self._ended))]
        return tuple(session.denials) if session is not None else ()

    def known(self, token: str | None) -> bool:
        """Whether `token` is that of a command of this runtime (running or ended lately)."""
        if not token:
            return False
        with self._lock:
            return token in self._live or token in self._ended

    def denials(self, token: str) -> tuple[NetworkDenial, ...]:
        """What the proxy refused the command of `token` so far."""
        with self._lock:
            session = self._live.get(token)
            return tuple(session.denials) if session is not None else ()

    def unattributed(self) -> tuple[NetworkDenial, ...]:
        """Refusals of connections whose command could not be told."""
        with self._lock:
            return tuple(self._unattributed)

    def record(self, token: str | None, host: str, port: int, reason: str) -> None:
        """A refused target of the command of `token`."""
        with self._lock:
            session = self._live.get(token) if token else None
            command = session.command if session is not None else UNKNOWN_COMMAND
            if session is None and token in self._ended:
                command = self._ended[token]  # e.g. a background command, after its start
            denial = NetworkDenial(host, port, command, reason)
            if session is not None:
                session.denials.append(denial)
            else:
                self._unattributed.append(denial)
