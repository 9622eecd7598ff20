"""The local filesystem sandbox: the `FileSystem` port confined to a project (SBX-1)."""

from soong_agent.adapters.sandbox.local_fs import LocalFileSystem
from soong_agent.adapters.sandbox.paths import PathPolicy, SensitiveRule
from soong_agent.adapters.sandbox.ripgrep import RipgrepMissing, find_rg

__all__ = ["LocalFileSystem", "PathPolicy", "RipgrepMissing", "SensitiveRule", "find_rg"]
