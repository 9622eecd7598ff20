"""The local filesystem sandbox: the `FileSystem` port confined to a project (SBX-1)."""

from soong_agent.adapters.sandbox.local_fs import LocalFileSystem
from soong_agent.adapters.sandbox.paths import PathPolicy, SensitiveRule

__all__ = ["LocalFileSystem", "PathPolicy", "SensitiveRule"]
