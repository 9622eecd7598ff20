"""Token counting adapters: an exact, offline o200k_base counter (CTX-4)."""

from soong_agent.adapters.tokens.o200k import O200kTokenCounter

__all__ = ["O200kTokenCounter"]
