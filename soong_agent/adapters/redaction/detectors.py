"""High-confidence secret patterns, each guarded by literal anchors that are cheap to look for.

The patterns follow the regex plugins of Yelp's detect-secrets 1.5.0 (Apache-2.0,
https://github.com/Yelp/detect-secrets, `detect_secrets/plugins/*.py`): aws.py, github_token.py,
gitlab_token.py, slack.py, stripe.py, private_key.py, openai.py, jwt.py, pypi_token.py,
sendgrid.py, npm.py, basic_auth.py. detect-secrets itself is not a dependency: importing it takes
~100 ms (340 modules, requests and PyYAML among them) and its scanner costs ~780 µs per line
with the default plugins (27 µs with only the regex ones) on the project's 2-core machine; the
runtime scrubs every event it records, so the patterns are compiled here and run only on text
that holds one of their anchors. Changes from the originals, each to fit redaction (the whole
secret is replaced, ordinary text must stay untouched): boundaries on both sides; lengths open
ended where tokens grew (GitHub, Stripe); the JWT signature included (detect-secrets' lazy tail
matches none of it); private keys cover the whole block, not only the header line; the AWS secret
key also without quotes (``AWS_SECRET_ACCESS_KEY=…`` in a .env file). Added: GitHub fine-grained
tokens, Anthropic keys and ``sk-…`` API keys in general, npm tokens, Google API keys, Hugging Face
tokens and ``Authorization:`` header values.

Entropy and keyword detectors are left out on purpose: they flag ordinary identifiers and hashes,
and a redaction that eats hashes and ids makes transcripts useless.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence


class Detector:
    """One kind of secret: `pattern` runs only on text holding one of the `anchors`.

    The regexes are compiled when first needed: most runs never meet most kinds of secret, and
    compiling all of them would cost each start ~6 ms.
    """

    __slots__ = (
        "_pattern",
        "_probe",
        "anchors",
        "group",
        "name",
        "probe_source",
        "source",
        "valid",
    )

    def __init__(
        self,
        name: str,
        anchors: tuple[str, ...],
        source: str,
        *,
        group: int = 0,
        valid: Callable[[str], bool] | None = None,
        probe: str | None = None,
    ) -> None:
        self.name = name
        self.anchors = anchors
        self.source = source
        self.group = group
        """The group that is the secret (context around it stays)."""
        self.valid = valid
        """A check of a candidate the pattern alone cannot make."""
        self.probe_source = probe
        """The anchors as one regex with a literal prefix (the regex engine then skips to it
        as fast as `str.find`), used on long texts; None: the alternation of the anchors."""
        self._pattern: re.Pattern[str] | None = None
        self._probe: re.Pattern[str] | None = None

    @property
    def pattern(self) -> re.Pattern[str]:
        if self._pattern is None:
            self._pattern = re.compile(self.source)
        return self._pattern

    @property
    def probe(self) -> re.Pattern[str]:
        if self._probe is None:
            source = self.probe_source or "|".join(re.escape(a) for a in self.anchors)
            self._probe = re.compile(source)
        return self._probe


def _jwt_is_formally_valid(token: str) -> bool:
    """Header and payload are base64url JSON (detect-secrets' `JwtTokenDetector` check)."""
    import base64
    import binascii
    import json

    parts = token.split(".")
    for part in parts[:2]:
        data = part.rstrip("=")
        data += "=" * (-len(data) % 4)
        try:
            json.loads(base64.urlsafe_b64decode(data.encode("ascii")).decode("utf-8"))
        except (ValueError, binascii.Error, UnicodeDecodeError):
            return False
    return True


def _looks_random(token: str) -> bool:
    """A generic ``sk-…`` key has a long run with digits and letters (kebab-case words do not)."""
    for run in re.findall(r"[A-Za-z0-9_]{20,}", token):
        if any(c.isdigit() for c in run) and any(c.isalpha() for c in run):
            return True
    return False


_PEM_LABEL = r"[ A-Z0-9]*PRIVATE KEY(?: BLOCK)?"
_PEM_OPEN = rf"----(?:-)? ?BEGIN{_PEM_LABEL} ?-{{4,5}}"
_PEM_CLOSE = rf"-{{4,5}} ?END{_PEM_LABEL} ?-{{4,5}}"
# The body: base64 lines, PEM headers (Proc-Type, DEK-Info) and line breaks, real ones or the
# `\n` of JSON text. Without an END line (a cut text), the base64 lines after the header go.
_BR = r"(?:\r?\n|\\r?\\n)"  # a line break, or its escape in JSON text
_PEM = (
    rf"{_PEM_OPEN}(?:[A-Za-z0-9+/=\s\\:,.-]*?{_PEM_CLOSE}"
    rf"|(?:{_BR}[A-Za-z0-9+/=]{{4,}}(?={_BR}|\Z|[\"']))*)"
)


def _token(prefix: str, rest: str) -> str:
    """A token starting with the literal `prefix` and not glued to a word before it.

    Every pattern starts with its literal (the boundary check comes right after it, as a
    lookbehind over it): the regex engine then jumps from one occurrence of the literal to the
    next as fast as `str.find`, where a leading lookbehind or a case-insensitive flag makes it
    try every position (~30x slower on a 30 KB tool result).
    """
    lit = re.escape(prefix)
    return rf"{lit}(?<![A-Za-z0-9_-]{lit}){rest}(?![A-Za-z0-9_-])"


def _aws_secret(prefix: str) -> str:
    return (
        prefix + r"(?i:.{0,20}?(?:key|pwd|pw|password|pass|token|secret).{0,20}?"
        r"(?:['\"]|[=:]\s*['\"]?))([0-9a-zA-Z/+]{40})(?![0-9a-zA-Z/+=])"
    )


_STRIPE = r"(?:live|test)_[0-9a-zA-Z]{24,}"

DETECTORS: tuple[Detector, ...] = (
    Detector("private_key", ("PRIVATE KEY",), (_PEM)),
    Detector(
        "private_key",
        ("Private-Lines:",),  # a PuTTY key file: the private part only
        (r"Private-Lines: *\d+\r?\n(?:[A-Za-z0-9+/=]+(?:\r?\n|\Z))+"),
    ),
    Detector(
        "aws_access_key",
        ("AKIA", "ASIA", "ABIA", "ACCA", "A3T"),
        (r"A(?<![A-Za-z0-9]A)(?:3T[A-Z0-9]|BIA|CCA|KIA|SIA)[A-Z0-9]{16}(?![A-Za-z0-9])"),
        probe=(r"A(?:KIA|SIA|BIA|CCA|3T)"),
    ),
    # detect-secrets' second AWS pattern, `aws … key … "<40>"`, case-insensitive; here the
    # prefix is taken in its two usual spellings so that it stays a literal
    Detector("aws_secret_key", ("aws",), _aws_secret("aws"), group=1),
    Detector("aws_secret_key", ("AWS",), _aws_secret("AWS"), group=1),
    Detector(
        "github_token",
        ("ghp_", "gho_", "ghu_", "ghs_", "ghr_"),
        _token("gh", r"[pousr]_[A-Za-z0-9_]{36,255}"),
        probe=r"gh[pousr]_",
    ),
    Detector("github_token", ("github_pat_",), _token("github_pat_", r"[A-Za-z0-9_]{22,255}")),
    Detector(
        "gitlab_token",
        ("glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-"),
        (
            r"gl(?:(?:pat|dt|ft|soat|rt)-[A-Za-z0-9_\-]{20,50}"
            r"|cbt-(?:[0-9a-fA-F]{2}_)?[A-Za-z0-9_\-]{20,50}"
            r"|imt-[A-Za-z0-9_\-]{25}"
            r"|ptt-[A-Za-z0-9_\-]{40}"
            r"|agent-[A-Za-z0-9_\-]{50,1024}"
            r"|oas-[A-Za-z0-9_\-]{64})(?!\w)"
        ),
        probe=(r"gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-"),
    ),
    Detector(
        "gitlab_token",
        ("glagent-", "gloas-", "GR1348941"),
        (
            r"(?:glagent-[A-Za-z0-9_\-]{50,1024}|gloas-[A-Za-z0-9_\-]{64}"
            r"|GR1348941[A-Za-z0-9_\-]{20,50})(?!\w)"
        ),
    ),
    Detector(
        "slack_token",
        ("xox",),  # detect-secrets matches any case; tokens are written in lower case
        (r"xox[abposr]-(?:\d+-)+[A-Za-z0-9]+"),
    ),
    Detector(
        "slack_webhook",
        ("hooks.slack.com",),
        (r"https://hooks\.slack\.com/services/T[a-zA-Z0-9_]+/B[a-zA-Z0-9_]+/[a-zA-Z0-9_]+"),
    ),
    Detector("stripe_key", ("sk_live_", "sk_test_"), _token("sk_", _STRIPE)),
    Detector("stripe_key", ("rk_live_", "rk_test_"), _token("rk_", _STRIPE)),
    Detector(
        "openai_key",
        ("T3BlbkFJ",),  # "OpenAI" in base64, inside every OpenAI key
        _token("sk-", r"[A-Za-z0-9_-]*T3BlbkFJ[A-Za-z0-9_-]+"),
    ),
    Detector("anthropic_key", ("sk-ant-",), _token("sk-ant-", r"[A-Za-z0-9_-]{20,}")),
    Detector("api_key", ("sk-",), _token("sk-", r"[A-Za-z0-9_-]{20,}"), valid=_looks_random),
    Detector(
        "jwt",
        ("eyJ",),
        (r"eyJ[A-Za-z0-9_=-]+\.[A-Za-z0-9_=-]+(?:\.[A-Za-z0-9_+/=-]*)?"),
        valid=_jwt_is_formally_valid,
    ),
    Detector(
        "pypi_token",
        ("pypi-AgE",),
        (r"pypi-AgE(?:IcHlwaS5vcmc|NdGVzdC5weXBpLm9yZw)[A-Za-z0-9_-]{70,}"),
    ),
    Detector("npm_token", ("npm_",), _token("npm_", r"[A-Za-z0-9]{36}")),
    Detector(
        "npm_token",
        ("_authToken",),
        (r"_authToken\s*=\s*['\"]?([^\s'\"$]{8,})"),
        group=1,
    ),
    Detector(
        "sendgrid_key",
        ("SG.",),
        (r"SG\.[a-zA-Z0-9_-]{22}\.[a-zA-Z0-9_-]{43}"),
    ),
    Detector("google_api_key", ("AIza",), _token("AIza", r"[0-9A-Za-z_-]{35}")),
    Detector("huggingface_token", ("hf_",), _token("hf_", r"[A-Za-z]{34}")),
    Detector(
        "url_password",
        ("://",),
        (r"://[^\s:/?#@'\"<>{}\[\]]+:([^\s/?#@'\"<>{}\[\]]+)@"),
        group=1,
    ),
    Detector(
        "authorization",
        ("uthorization",),
        (
            r"uthorization(?<=[Aa]uthorization)[\"']?\s*[:=]\s*[\"']?"
            r"(?i:bearer|basic|token)\s+([A-Za-z0-9._~+/=-]{8,})"
        ),
        group=1,
    ),
)


@functools.lru_cache(maxsize=64)
def _trie(words: tuple[str, ...]) -> str:
    return literal_trie_of(words)


def literal_trie(words: Iterable[str]) -> str:
    """`literal_trie_of`, remembered (each runtime asks for the same one)."""
    return _trie(tuple(sorted({w for w in words if w})))


def literal_trie_of(words: Iterable[str]) -> str:
    """A regex finding any of `words`, written as a trie: ``A(?:KIA|SIA)|sk-`` rather than
    ``AKIA|ASIA|sk-``. The regex engine tries the branches of an alternation one by one at
    each position; a trie tries one per character, which halves the time of the search."""

    def node(suffixes: list[str]) -> str:
        if "" in suffixes:
            return ""  # a shorter word ends here: finding it is enough
        groups: dict[str, list[str]] = {}
        for word in suffixes:
            groups.setdefault(word[0], []).append(word[1:])
        branches = [re.escape(c) + node(rest) for c, rest in sorted(groups.items())]
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    unique = sorted({w for w in words if w})
    return node(unique) if unique else "(?!)"


def anchors_of(detectors: Sequence[Detector]) -> re.Pattern[str]:
    """Any anchor of any detector, as one regex: the one search a short text pays for."""
    return re.compile(literal_trie(a for d in detectors for a in d.anchors))
