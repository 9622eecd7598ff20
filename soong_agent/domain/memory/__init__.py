"""Long-term memory: the memory itself, its categories, where its files may be, what may be
stored, and the index.

`Memory`, `MemoryEntry`, the categories and the errors are the port's vocabulary
(`soong_agent.ports.memory`), re-exported here; the rules are this package's.
"""

from soong_agent.domain.memory.index import render_index
from soong_agent.domain.memory.paths import (
    INDEX_FILE,
    NAME_RULE,
    MemoryPath,
    check_category,
    check_name,
    check_path,
    memory_path,
    name_problem,
)
from soong_agent.domain.memory.policy import (
    MemoryPolicy,
    MemoryRejection,
    MemoryVerdict,
    RejectionCode,
    categorise,
)
from soong_agent.ports.memory import (
    MEMORY_CATEGORIES,
    Memory,
    MemoryCatalogue,
    MemoryCategory,
    MemoryEntry,
    MemoryFileInvalid,
    MemoryNotFound,
    MemoryPathRefused,
)

__all__ = [
    "INDEX_FILE",
    "MEMORY_CATEGORIES",
    "NAME_RULE",
    "Memory",
    "MemoryCatalogue",
    "MemoryCategory",
    "MemoryEntry",
    "MemoryFileInvalid",
    "MemoryNotFound",
    "MemoryPath",
    "MemoryPathRefused",
    "MemoryPolicy",
    "MemoryRejection",
    "MemoryVerdict",
    "RejectionCode",
    "categorise",
    "check_category",
    "check_name",
    "check_path",
    "memory_path",
    "name_problem",
    "render_index",
]
