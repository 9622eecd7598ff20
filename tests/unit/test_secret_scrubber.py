"""The real SecretRedactor (CFG-6): key values from the environment and high-confidence
patterns become ``[redacted:NAME]``; ordinary text, code and ids are left alone."""

from __future__ import annotations

import pytest

from soong_agent.adapters.redaction import SecretScrubber
from soong_agent.adapters.redaction.detectors import DETECTORS
from soong_agent.testing import DictSecretSource

JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
    "dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
)

SECRETS = [
    ("aws_access_key", "AKIAIOSFODNN7EXAMPLE", "aws_access_key_id = {}"),
    ("aws_access_key", "ASIAY34FZKBOKMUTVV7A", "{}"),
    ("aws_secret_key", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY={}"),
    ("aws_secret_key", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", 'aws_secret = "{}"'),
    ("github_token", "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8", "token: {}"),
    ("github_token", "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", "{}"),
    ("gitlab_token", "glpat-abcdefghij0123456789ab", "{}"),
    ("slack_token", "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp", "SLACK={}"),
    ("slack_webhook", "https://hooks.slack.com/services/T0001/B0002/XXXXXXXXXXXXXXXX", "{}"),
    ("stripe_key", "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "{}"),
    ("openai_key", "sk-proj-abcdefghij1234567890T3BlbkFJabcdefghij1234567890", "{}"),
    ("anthropic_key", "sk-ant-api03-" + "x1Y2z3" * 8 + "-AA", "{}"),
    ("api_key", "sk-0123456789abcdef0123456789abcdef", "DEEPSEEK_API_KEY={}"),
    ("jwt", JWT, "Authorization header was {}"),
    ("npm_token", "npm_" + "a1b2c3d4e5f6" * 3, "{}"),
    ("google_api_key", "AIzaSyA1234567890abcdefghijklmnopqrstuv", "{}"),
    ("url_password", "hunter2pass", "postgres://admin:{}@db.example.com:5432/app"),
    ("authorization", "abc.def-ghi_123456", "Authorization: Bearer {}"),
]


@pytest.fixture
def scrubber() -> SecretScrubber:
    return SecretScrubber(DictSecretSource({"MY_KEY": "value-0f3a9c2e"}), ["MY_KEY"])


@pytest.mark.parametrize(("name", "secret", "context"), SECRETS)
def test_each_kind_of_secret_is_replaced_by_its_kind(
    scrubber: SecretScrubber, name: str, secret: str, context: str
) -> None:
    text = "before\n" + context.format(secret) + "\nafter"
    out = scrubber.redact(text)
    assert secret not in out
    assert out == "before\n" + context.format(f"[redacted:{name}]") + "\nafter"


@pytest.mark.parametrize(
    "block",
    [
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1234\nabcd==\n"
        "-----END RSA PRIVATE KEY-----",
        "-----BEGIN OPENSSH PRIVATE KEY-----\\nb3BlbnNzaC1rZXktdjE\\n"
        "-----END OPENSSH PRIVATE KEY-----",
        "---- BEGIN SSH2 ENCRYPTED PRIVATE KEY ----\nAAAAB3NzaC1yc2E\n"
        "---- END SSH2 ENCRYPTED PRIVATE KEY ----",
        # cut short: the base64 lines after the header go
        "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQ",
    ],
)
def test_a_private_key_block_goes_whole(scrubber: SecretScrubber, block: str) -> None:
    out = scrubber.redact(f"key:\n{block}\nend of file")
    assert out == "key:\n[redacted:private_key]\nend of file"


ORDINARY = [
    "The quick brown fox jumps over the lazy dog.",
    "def task_runner(x): return x + 1  # see https://example.com/docs?a=1#b",
    "risk-assessment-framework and sk-learn-compatible-estimator-interface",
    "commit 3f786850e387550fdab836ed7e6dc881de23001b; uuid 123e4567-e89b-12d3-a456-426614174000",
    "ASIAPACIFICREGIONALOFFICE, AKIA alone, xAKIAIOSFODNN7EXAMPLE glued to a word",
    "BEGIN TRANSACTION; INSERT INTO t VALUES (1); END;",
    "-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIU\n-----END CERTIFICATE-----",
    "npm_config_cache and hf_hub_download and ghp_short and eyJ alone",
    "ssh://git@github.com:22/org/repo.git and https://user@example.com/",
    "_authToken=${NPM_TOKEN}",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_left_alone(scrubber: SecretScrubber, text: str) -> None:
    assert scrubber.redact(text) is text


def test_key_values_are_read_when_first_needed_and_again_after_refresh_s() -> None:
    secrets = DictSecretSource({"A_KEY": "alpha-0123456789"})
    now = [0.0]
    scrubber = SecretScrubber(secrets, ["A_KEY", "B_KEY"], refresh_s=1.0, monotonic=lambda: now[0])
    assert secrets.reads == []  # nothing is read at start
    assert scrubber.redact("x alpha-0123456789") == "x [redacted:A_KEY]"
    assert sorted(secrets.reads) == ["A_KEY", "B_KEY"]
    secrets.set("B_KEY", "bravo-9876543210")
    assert scrubber.redact("bravo-9876543210") == "bravo-9876543210"  # not yet re-read
    now[0] = 1.5
    assert scrubber.redact("bravo-9876543210") == "[redacted:B_KEY]"


def test_short_values_are_ignored_and_a_longer_value_wins() -> None:
    secrets = DictSecretSource({"SHORT": "abc1234", "LONG": "abc1234-and-more", "EMPTY": ""})
    scrubber = SecretScrubber(secrets, ["SHORT", "LONG", "EMPTY"])
    assert scrubber.redact("abc1234 and abc1234-and-more") == "abc1234 and [redacted:LONG]"


def test_a_value_with_surrounding_whitespace_is_found_without_it() -> None:
    scrubber = SecretScrubber(DictSecretSource({"K": "  spaced-value-42\n"}), ["K"])
    assert scrubber.redact("got spaced-value-42.") == "got [redacted:K]."


def test_a_key_value_is_named_before_a_pattern_that_also_matches() -> None:
    key = "sk-0123456789abcdef0123456789abcdef"
    scrubber = SecretScrubber(DictSecretSource({"OPENAI_API_KEY": key}), ["OPENAI_API_KEY"])
    assert scrubber.redact(f"k={key}") == "k=[redacted:OPENAI_API_KEY]"


def test_settled_holds_a_private_key_block_until_its_end_line(scrubber: SecretScrubber) -> None:
    head = "text\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n"
    assert scrubber.settled(head) == len("text\n")
    assert scrubber.settled("text -----BEGIN RSA PRI") == len("text")
    done = head + "-----END RSA PRIVATE KEY-----\nok "
    assert scrubber.settled(done) == len(done)
    assert scrubber.settled("BEGIN TRANSACTION; go ") == len("BEGIN TRANSACTION; go ")


def test_settled_holds_only_what_may_begin_a_secret(scrubber: SecretScrubber) -> None:
    assert scrubber.settled("calling the tool") == len("calling the tool")
    for held in ("s", "sk", "key=sk-ab", "AK", "ghp_x", "val"):
        assert scrubber.settled(f"one {held}") == len("one "), held
    assert scrubber.settled("one x=value-0f3") == len("one x=")  # where the key may begin
    # a secret recognised by what precedes it on its line: the token after it is held
    assert scrubber.settled("Authorization: Bearer abc1") == len("Authorization: Bearer ")
    assert scrubber.settled("abc1", before="Authorization: Bearer ") == 0
    assert scrubber.settled("abc1", before="Authorization: x\nBearer ") == len("abc1")
    assert scrubber.settled("sk-" + "x" * 10_000) == 10_003 - 4096


def test_settled_holds_a_run_ending_in_the_start_of_any_anchor(scrubber: SecretScrubber) -> None:
    anchors = {a for d in DETECTORS for a in d.anchors}
    for anchor in sorted(anchors):
        for k in range(1, len(anchor)):
            start = anchor[:k]
            if " " in start:
                continue  # a run ends at whitespace (a private key block is held apart)
            assert scrubber.settled(f"word {start}") == len("word "), start
    for plain in ("one tool", "zzz", "the end."):
        assert scrubber.settled(plain) == len(plain), plain


def test_a_short_text_whose_secret_began_in_the_text_before_is_scrubbed(
    scrubber: SecretScrubber,
) -> None:
    # the part of the value in `text` goes; what was handed on before stays as it was
    assert scrubber.redact("0f3a9c2e and more", before="the key value-") == (
        "[redacted:MY_KEY] and more"
    )
    assert scrubber.redact("IOSFODNN7EXAMPLE ok", before="id AKIA") == (
        "[redacted:aws_access_key] ok"
    )
    assert scrubber.redact(" ok", before="the key value-0f3a9c2e") == " ok"
    text = "nothing here"
    assert scrubber.redact(text, before="nothing before either") is text


def test_every_detector_compiles_and_has_anchors() -> None:
    for detector in DETECTORS:
        assert detector.anchors and detector.pattern.pattern and detector.probe.pattern
        for anchor in detector.anchors:
            # every pattern match contains one of its anchors, or the probe would skip it
            assert anchor == anchor.strip() and anchor
