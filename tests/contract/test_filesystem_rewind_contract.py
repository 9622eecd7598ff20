"""The FileSystem members a rewind writes through (RWD-1), against every implementation (the
in-memory fake and the local disk, the fixtures of `test_filesystem_contract`): `write_bytes`
puts exactly the bytes given (any bytes, not only UTF-8), `remove_file` removes a file and
nothing else, and both refuse what a write refuses. The local disk's symlink rules are in
`tests/integration/test_rewind_local_fs.py`."""

from __future__ import annotations

import pytest

from soong_agent.ports.errors import SandboxViolation
from tests.contract.test_filesystem_contract import Sandbox, box, two_roots

__all__ = ["box", "two_roots"]  # the fixtures, used by name below

ODD_BYTES = b"\x00\xff\xfe\x80\r\n\xc3(not utf-8)"


async def test_write_bytes_puts_exactly_the_bytes(box: Sandbox) -> None:
    fs = box.fs
    await fs.write_bytes("made/odd.bin", ODD_BYTES)
    assert await fs.read_bytes("made/odd.bin") == ODD_BYTES
    await fs.write_bytes("README.md", b"")
    assert await fs.read_bytes("README.md") == b""
    assert box.names(box.inside("made")) == ["odd.bin"]  # no temporary left beside it


async def test_remove_file_removes_one_file_and_refuses_a_folder(box: Sandbox) -> None:
    fs = box.fs
    await fs.remove_file("src/b.py")
    assert not await fs.exists("src/b.py")
    assert await fs.read_bytes("src/a.py") == b"import os\nprint('a')\n"
    with pytest.raises(FileNotFoundError):
        await fs.remove_file("src/b.py")
    with pytest.raises(IsADirectoryError):
        await fs.remove_file("src/deep")
    assert await fs.exists("src/deep/c.py")


async def test_both_refuse_sensitive_and_outside_paths(box: Sandbox) -> None:
    fs = box.fs
    for path in [".env", "conf/.env.local", "~/.ssh/id_rsa", "../outside/outside.txt"]:
        with pytest.raises(SandboxViolation):
            await fs.write_bytes(path, b"pwned")
        with pytest.raises(SandboxViolation):
            await fs.remove_file(path)
    assert box.names(box.outside) == ["outside.txt"]


async def test_both_follow_the_write_roots(two_roots: Sandbox) -> None:
    fs = two_roots.fs
    extra = f"{two_roots.extra_root}/kept.bin"
    await fs.write_bytes(extra, ODD_BYTES)
    assert two_roots.names(two_roots.extra_root) == ["kept.bin"]
    await fs.remove_file(extra)
    assert two_roots.names(two_roots.extra_root) == []
