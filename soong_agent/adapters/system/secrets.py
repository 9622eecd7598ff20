"""Secrets from the process environment, read when first needed (CFG-6)."""

from __future__ import annotations

import os
from collections.abc import Mapping


class EnvSecretSource:
    """Reads variables from the environment at call time, never earlier."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = env

    def get(self, name: str) -> str | None:
        env = os.environ if self._env is None else self._env
        value = env.get(name)
        return value or None
