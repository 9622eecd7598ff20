"""The seccomp filters of commands under Landlock (SBX-3, SBX-4): what sockets a command may
open without a network grant, and with only the filtering proxy to reach."""

from __future__ import annotations

import errno
from typing import Any

_AF_UNIX = 1
_MSG_FASTOPEN = 0x20000000
_X32 = 0x40000000
"""x86_64's x32 syscalls are numbered `nr | 0x40000000` under the same architecture: a rule
for `socket` does not see `socket` called as x32, so the calls these filters guard are refused
under their x32 numbers too (kernels built with x32 support take them)."""
_X32_GUARDED = {"socket": 41, "sendto": 44, "sendmsg": 518, "sendmmsg": 538, "io_uring_setup": 425}


def _refuse_x32(rules: Any, names: tuple[str, ...]) -> None:
    import platform

    if platform.machine() in ("x86_64", "AMD64"):
        for name in names:
            rules.errno(_X32 | _X32_GUARDED[name], errno.EPERM)


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
        _refuse_x32(rules, ("socket", "io_uring_setup"))
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
    cover), a send that opens a TCP connection itself (`MSG_FASTOPEN`: Landlock checks
    connect() only), and io_uring_setup; None when seccomp filters cannot be used here."""
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
        fast_open = (_MSG_FASTOPEN, _MSG_FASTOPEN)
        rules.errno("sendto", errno.EPERM, args=[(3, masked, *fast_open)])
        rules.errno("sendmsg", errno.EPERM, args=[(2, masked, *fast_open)])
        rules.errno("sendmmsg", errno.EPERM, args=[(3, masked, *fast_open)])
        rules.errno("io_uring_setup", errno.EPERM)
        _refuse_x32(rules, tuple(_X32_GUARDED))
        return rules
    except (OSError, ValueError, KeyError):
        return None
