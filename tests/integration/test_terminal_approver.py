"""The terminal approver with a detail below the question: cut with a count of the hidden lines,
``d`` to see the whole of it, colours only on a terminal (and only after scrubbing), and the
answers 1/2/3 meaning what they always meant. Real text streams, the real secret scrubber."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from soong_agent.adapters.approvals.terminal import (
    SHOWN_LINE_CHARS,
    SHOWN_LINES,
    TerminalApprover,
    color_wanted,
)
from soong_agent.adapters.redaction.scrubber import SecretScrubber
from soong_agent.ports.approval import ApprovalRequest, Decision

ESC = "\x1b["
LONG_DIFF = "\n".join(
    ["--- a/big.txt", "+++ b/big.txt", "@@ -1,100 +1,100 @@"]
    + [f"-old line {n}" for n in range(100)]
    + [f"+new line {n}" for n in range(100)]
)
SHORT_DIFF = "--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three"


def request(detail: str) -> ApprovalRequest:
    return ApprovalRequest(
        tool="edit_file",
        call_id="c1",
        permission_class="write",
        summary="edit big.txt (replace 3 characters)",
        session_scope="edit_file on any file in the project's top folder and below",
        detail=detail,
    )


async def ask(
    detail: str, typed: str, *, color: bool = False, clean: bool = False
) -> tuple[Decision, str]:
    shown: list[str] = []
    scrubber = SecretScrubber()
    approver = TerminalApprover(
        stdin=io.StringIO(typed),
        write=shown.append,
        color=color,
        clean=scrubber.redact if clean else None,
    )
    decision = await approver.decide(request(detail))
    return decision, "".join(shown)


async def test_a_short_diff_is_shown_whole_under_the_question() -> None:
    decision, shown = await ask(SHORT_DIFF, "1\n")
    assert decision == "allow_once"
    assert "    -two\n    +TWO\n" in shown
    assert shown.index("wants to edit") < shown.index("-two") < shown.index("1) allow once")
    assert "answer [1/2/3]: " in shown and "answer d" not in shown


async def test_a_long_diff_is_cut_with_the_count_of_hidden_lines() -> None:
    decision, shown = await ask(LONG_DIFF, "3\n")
    assert decision == "deny"
    hidden = 203 - SHOWN_LINES
    assert f"    … {hidden} more lines; answer d to see the whole diff\n" in shown
    assert "old line 36" in shown and "old line 37" not in shown
    assert "answer [1/2/3/d]: " in shown


async def test_d_shows_the_whole_diff_and_asks_again() -> None:
    decision, shown = await ask(LONG_DIFF, "d\n2\n")
    assert decision == "allow_for_session"
    first, again = shown.split("answer [1/2/3/d]: d\n")  # the piped answer is echoed
    assert "new line 99" not in first
    assert "    +new line 99\n" in again and "more lines" not in again
    assert again.count("2) allow for session") == 1 and again.endswith("answer [1/2/3/d]: 2\n")


@pytest.mark.parametrize(
    ("typed", "decision"),
    [
        ("1\n", "allow_once"),
        ("2\n", "allow_for_session"),
        ("3\n", "deny"),
        ("d\nd\n1\n", "allow_once"),
    ],
)
async def test_the_answers_keep_their_meaning_with_a_detail(typed: str, decision: Decision) -> None:
    assert (await ask(LONG_DIFF, typed))[0] == decision


async def test_d_then_a_closed_stdin_denies() -> None:
    decision, shown = await ask(LONG_DIFF, "d\n")
    assert decision == "deny"
    assert shown.endswith("(no answer: stdin is closed) -> deny\n")


async def test_d_is_no_answer_when_nothing_was_cut() -> None:
    decision, shown = await ask(SHORT_DIFF, "d\n1\n")
    assert decision == "deny"
    assert "(answer 'd' not understood) -> deny" in shown


async def test_a_very_long_line_is_cut_and_d_shows_it() -> None:
    line = "+" + "x" * (SHOWN_LINE_CHARS * 2)
    decision, shown = await ask(f"--- a/m.js\n+++ b/m.js\n@@ -0,0 +1 @@\n{line}", "d\n1\n")
    assert decision == "allow_once"
    first, again = shown.split("answer [1/2/3/d]: d\n")
    assert line not in first and "…\n" in first
    assert "answer d to see the whole diff" in first
    assert f"    {line}\n" in again


async def test_no_colour_codes_unless_asked_for() -> None:
    _, plain = await ask(LONG_DIFF, "d\n1\n")
    assert ESC not in plain
    _, coloured = await ask(SHORT_DIFF, "1\n", color=True)
    assert f"{ESC}31m-two{ESC}0m" in coloured and f"{ESC}32m+TWO{ESC}0m" in coloured
    assert "     one\n" in coloured  # context lines keep the terminal's own colour


async def test_only_a_diff_is_coloured() -> None:
    _, shown = await ask("runs 2 commands:\n  rm -rf build\n  make", "1\n", color=True)
    assert ESC not in shown and "      rm -rf build\n" in shown


async def test_a_secret_in_a_coloured_diff_is_scrubbed_before_the_colours() -> None:
    body = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onLRnrq0"
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
    diff = "--- /dev/null\n+++ b/key.pem\n@@ -0,0 +1,3 @@\n" + "\n".join(
        f"+{line}" for line in pem.split("\n")
    )
    _, shown = await ask(diff, "3\n", color=True, clean=True)
    assert body not in shown and "[redacted:private_key]" in shown


async def test_control_characters_in_a_detail_are_made_visible() -> None:
    _, shown = await ask("URL: https://example.com/\x1b]8;;evil\x07\nhost: example.com", "1\n")
    assert "\x1b" not in shown and "\x07" not in shown
    assert "\\x1b]8;;evil\\x07" in shown


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("stream", "env", "wanted"),
    [
        (_Terminal(), {}, True),
        (_Terminal(), {"NO_COLOR": "1"}, False),
        (_Terminal(), {"NO_COLOR": ""}, True),
        (_Terminal(), {"TERM": "dumb"}, False),
        (io.StringIO(), {}, False),
    ],
)
def test_color_wanted(stream: io.StringIO, env: dict[str, str], wanted: bool) -> None:
    assert color_wanted(stream, env) is wanted


def test_a_closed_stream_wants_no_colour(tmp_path: Path) -> None:
    with (tmp_path / "err").open("w") as stream:
        pass
    assert color_wanted(stream, {}) is False  # its isatty raises ValueError


async def test_by_default_colours_follow_stderr_and_need_a_scrubber(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    monkeypatch.setattr(sys, "stderr", _Terminal())

    async def shown_with(clean: bool) -> str:
        written: list[str] = []
        approver = TerminalApprover(
            stdin=io.StringIO("1\n"),
            write=written.append,
            clean=(lambda text: text) if clean else None,
        )
        await approver.decide(request(SHORT_DIFF))
        return "".join(written)

    assert ESC in await shown_with(clean=True)
    assert ESC not in await shown_with(clean=False)  # never colour what was not scrubbed first
    monkeypatch.setenv("NO_COLOR", "1")
    assert ESC not in await shown_with(clean=True)
