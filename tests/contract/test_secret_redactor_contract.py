"""The SecretRedactor contract (CFG-6), over the fake (DictSecretRedactor) and the real
SecretScrubber: a key value never survives `redact`, ordinary text comes back untouched (the same
object), `before` is context only, and a text streamed in pieces, cut where `settled` says,
comes out exactly as the whole text would."""

from __future__ import annotations

import json
import random

import pytest

from soong_agent.adapters.redaction import SecretScrubber
from soong_agent.ports.secrets import SecretRedactor
from soong_agent.testing import DictSecretRedactor, DictSecretSource

KEY = "kv-8f2c91d04be7a35f-test-key"
NAME = "MY_KEY"
MARK = f"[redacted:{NAME}]"


@pytest.fixture(params=["fake", "real"])
def redactor(request: pytest.FixtureRequest) -> SecretRedactor:
    if request.param == "fake":
        return DictSecretRedactor({NAME: KEY})
    return SecretScrubber(DictSecretSource({NAME: KEY}), [NAME])


def stream(redactor: SecretRedactor, pieces: list[str]) -> str:
    """What a reader of the pieces gets: each cut where `settled` allows, the rest at the end."""
    out, pending, before = [], "", ""
    for piece in pieces:
        pending += piece
        cut = redactor.settled(pending, before=before)
        assert 0 <= cut <= len(pending)
        if cut:
            out.append(redactor.redact(pending[:cut], before=before))
            before, pending = before + pending[:cut], pending[cut:]
    out.append(redactor.redact(pending, before=before) if pending else "")
    return "".join(out)


def test_the_redactor_implements_the_port(redactor: SecretRedactor) -> None:
    assert isinstance(redactor, SecretRedactor)


def test_every_occurrence_of_a_value_is_replaced_by_its_name(redactor: SecretRedactor) -> None:
    text = f"{NAME}={KEY}\nagain: {KEY}."
    assert redactor.redact(text) == f"{NAME}={MARK}\nagain: {MARK}."
    arguments = json.dumps({"command": f"curl -H 'x-key: {KEY}' example.com"})
    assert KEY not in redactor.redact(arguments)
    assert json.loads(redactor.redact(arguments))["command"].count(MARK) == 1


def test_text_without_secrets_is_the_same_object(redactor: SecretRedactor) -> None:
    for text in ("", "hello", "calling the tool", "x" * 5000, '{"path": "a.txt"}'):
        assert redactor.redact(text) is text


def test_before_is_context_only(redactor: SecretRedactor) -> None:
    assert redactor.redact(" and more", before=f"key {KEY}") == " and more"
    assert redactor.redact(f" then {KEY}", before="first") == f" then {MARK}"


def test_settled_never_cuts_inside_a_value(redactor: SecretRedactor) -> None:
    text = f"the key is {KEY} and that is all"
    start = text.index(KEY)
    for end in range(start + 1, start + len(KEY)):
        assert redactor.settled(text[:end]) <= start, text[:end]
    assert redactor.settled("plain words ") == len("plain words ")
    assert redactor.settled("plain word") == len("plain word")  # ordinary text goes whole


@pytest.mark.parametrize("seed", range(12))
def test_a_streamed_text_comes_out_as_the_whole_would(redactor: SecretRedactor, seed: int) -> None:
    rng = random.Random(seed)
    text = f"Your .env holds\n{NAME}={KEY}\nand the key {KEY} again, done."
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(1, 20)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    out = stream(redactor, pieces)
    assert out == redactor.redact(text)
    assert KEY not in out and KEY[:10] not in out and out.count(MARK) == 2
