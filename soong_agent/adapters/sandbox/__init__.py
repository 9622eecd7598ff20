"""The local filesystem sandbox: the `FileSystem` port confined to a project (SBX-1)."""

from soong_agent.adapters.sandbox.local_fs import LocalFileSystem
from soong_agent.adapters.sandbox.paths import PathPolicy
from soong_agent.adapters.sandbox.ripgrep import RipgrepMissing, find_rg

__all__ = ["LocalFileSystem", "PathPolicy", "RipgrepMissing", "find_rg"]
