"""The seccomp filters of commands under Landlock (SBX-3, SBX-4): what sockets a command may
open without a network grant, and with only the filtering proxy to reach."""

from __future__ import annotations

import errno
from typing import Any

_AF_UNIX = 1


def no_network_filter() -> Any:
    """A seccomp filter refusing socket() for every family but AF_UNIX, and io_uring_setup;
    None when seccomp filters cannot be used here."""
    try:
        import seccompy
    except ImportError:  # pragma: no cover - a dependency
        return None
    try:
        if not seccompy.supported():
            return None
        rules = seccompy.Filter(seccompy.Action.ALLOW)
        rules.errno("socket", errno.EPERM, args=[(0, seccompy.CmpOp.NE, _AF_UNIX)])
        rules.errno("io_uring_setup", errno.EPERM)
        return rules
    except (OSError, ValueError, KeyError):
        return None


_AF_INET = 2
_SOCK_TYPE_MASK = 0xF
_SOCK_STREAM = 1
_IPPROTO_TCP = 6


def proxied_filter() -> Any:
    """A seccomp filter refusing socket() for every family but AF_UNIX and AF_INET TCP (type
    SOCK_STREAM, protocol 0 or TCP: not SCTP or MPTCP, which Landlock's TCP rules do not
    cover), and io_uring_setup; None when seccomp filters cannot be used here."""
    try:
        import seccompy
    except ImportError:  # pragma: no cover - a dependency
        return None
    try:
        if not seccompy.supported():
            return None
        eq, masked = seccompy.CmpOp.EQ, seccompy.CmpOp.MASKED_EQ
        rules = seccompy.Filter(seccompy.Action.ALLOW)
        rules.allow("socket", args=[(0, eq, _AF_UNIX)])
        for protocol in (0, _IPPROTO_TCP):
            stream = (1, masked, _SOCK_STREAM, _SOCK_TYPE_MASK)
            rules.allow("socket", args=[(0, eq, _AF_INET), stream, (2, eq, protocol)])
        rules.errno("socket", errno.EPERM)
        rules.errno("io_uring_setup", errno.EPERM)
        return rules
    except (OSError, ValueError, KeyError):
        return None
