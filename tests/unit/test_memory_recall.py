"""Recall (MEM-4) with fakes: the recall model's names reach the run's prompt within the budget,
a failing, slow or garbage recall falls back to BM25 and the event says so, an empty memory
costs nothing, and 2,000 memories stay within the catalogue and context budgets."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from soong_agent.application.memory.catalogue import CATALOGUE_HEADER, render_catalogue
from soong_agent.application.memory.lexical import lexical_order, terms
from soong_agent.application.memory.recall import (
    MEMORY_HEADER,
    MemoryRecall,
    RecallSettings,
    parse_names,
    render_memories,
)
from soong_agent.domain.skills import estimate_tokens
from soong_agent.ports.errors import ProviderError
from soong_agent.ports.events import MemoryRecalled, RunStarted
from soong_agent.ports.memory import Memory, MemoryEntry
from soong_agent.ports.model import ModelRequest
from soong_agent.testing import (
    DictSecretRedactor,
    InMemoryMemoryStore,
    ScriptedModel,
    ScriptedResponse,
)
from tests.support.harness import Harness

TABS = Memory(
    name="prefer_tabs",
    description="The user indents code with tabs",
    category="user",
    body="Always indent with tabs, never spaces.",
)
DOCS = Memory(
    name="docs_wiki",
    description="Team documentation lives in the wiki",
    category="reference",
    body="See https://wiki.example.com/team for the runbooks.",
)
TESTS = Memory(
    name="small_commits",
    description="The user wants small commits with honest messages",
    category="feedback",
    body="Commit early; one change per commit.",
)


def store_of(*memories: Memory) -> InMemoryMemoryStore:
    return InMemoryMemoryStore(memories or (TABS, DOCS, TESTS))


def memory_part(request: ModelRequest) -> str | None:
    parts = [p for p in request.system if p.label == "memory"]
    assert len(parts) <= 1
    return parts[0].text if parts else None


async def run_with_recall(
    recall_model: ScriptedModel, store: InMemoryMemoryStore, message: str, **settings: Any
) -> tuple[Harness, list[Any]]:
    main = ScriptedModel([ScriptedResponse.text("ok")])
    h = Harness(main)
    h.service.recall = MemoryRecall(store, recall_model, RecallSettings(**settings))
    run = await h.service.start(message)
    result = await run.wait()
    assert result.ok, result.reason
    return h, [e async for e in run.events()]


def recalled(events: list[Any]) -> MemoryRecalled:
    (event,) = [e for e in events if isinstance(e, MemoryRecalled)]
    return event


async def test_the_recall_models_names_enter_the_prompt_labelled() -> None:
    recall_model = ScriptedModel([ScriptedResponse.text('["prefer_tabs", "no_such_memory"]')])
    h, events = await run_with_recall(recall_model, store_of(), "reformat main.py")
    text = memory_part(h.model.last_call)
    assert text is not None and text.startswith(MEMORY_HEADER)
    assert TABS.body in text and '<memory name="prefer_tabs" category="user">' in text
    assert DOCS.body not in text and TESTS.body not in text
    event = recalled(events)
    assert (event.method, event.names) == ("model", ["prefer_tabs"])
    assert "1 unknown names dropped" in event.reason
    # the recall model saw the catalogue and the request; the run's events are stored
    (asked,) = recall_model.calls
    shown = asked.messages[0].content[0].text  # type: ignore[union-attr]
    assert CATALOGUE_HEADER in shown and "- docs_wiki [reference]:" in shown
    assert shown.rstrip().endswith("reformat main.py")
    stored = [e.type for c in h.store.commits for e in c.events]
    assert "memory_recalled" in stored


async def test_the_memory_part_comes_after_the_stable_parts_and_is_dynamic() -> None:
    recall_model = ScriptedModel([ScriptedResponse.text('["prefer_tabs"]')])
    h, _ = await run_with_recall(recall_model, store_of(), "hello")
    labels = [(p.label, p.stable) for p in h.model.last_call.system]
    assert labels[-2:] == [("memory", False), ("environment", False)]
    assert all(stable for _, stable in labels[:-2])


async def test_the_memory_part_stays_within_its_budget_with_a_visible_cut() -> None:
    long = [
        Memory(name=f"fact_{i}", description=f"Fact {i}", category="user", body="x " * 600)
        for i in range(4)
    ]
    recall_model = ScriptedModel([ScriptedResponse.text('["fact_0", "fact_1", "fact_2"]')])
    h, events = await run_with_recall(
        recall_model, store_of(*long), "facts", context_tokens=500, top_k=3
    )
    text = memory_part(h.model.last_call)
    assert text is not None
    assert estimate_tokens(text) <= 500
    assert "memory 'fact_1' cut here" in text
    assert "1 more recalled memories left out" in text and "fact_2" in text
    event = recalled(events)
    assert event.names == ["fact_0", "fact_1"]
    assert "left out by the memory budget" in event.reason


async def test_top_k_caps_what_the_model_chose() -> None:
    recall_model = ScriptedModel(
        [ScriptedResponse.text('["prefer_tabs", "docs_wiki", "small_commits"]')]
    )
    _, events = await run_with_recall(recall_model, store_of(), "anything", top_k=2)
    assert recalled(events).names == ["prefer_tabs", "docs_wiki"]


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        (
            ProviderError("boom", kind="server", provider="scripted", base_url="memory://x"),
            "the recall model failed: scripted at memory://x: server: boom",
        ),
        (ScriptedResponse.text("I would pick the tabs one."), "not a JSON list of names"),
        (ScriptedResponse.text('{"pick": "prefer_tabs"}'), "not a JSON list of names"),
        (ScriptedResponse.text('["ghost"]'), "named no memory that exists"),
    ],
)
async def test_a_failing_or_garbage_recall_falls_back_to_bm25(answer: Any, said: str) -> None:
    recall_model = ScriptedModel([answer])
    h, events = await run_with_recall(recall_model, store_of(), "use tabs to indent the code")
    event = recalled(events)
    assert event.method == "lexical"
    assert said in event.reason and "BM25 picked 1 instead" in event.reason
    assert event.names == ["prefer_tabs"]
    text = memory_part(h.model.last_call)
    assert text is not None and TABS.body in text


async def test_a_recall_past_its_timeout_falls_back_to_bm25() -> None:
    slow = ScriptedModel([ScriptedResponse.text('["docs_wiki"]', delay_s=30)])
    _, events = await run_with_recall(
        slow, store_of(), "where is the team wiki documentation", timeout_s=0.05
    )
    event = recalled(events)
    assert event.method == "lexical" and event.names == ["docs_wiki"]
    assert "did not answer within 0.05 s" in event.reason


async def test_no_memories_means_no_call_no_part_no_event() -> None:
    recall_model = ScriptedModel()  # any call would fail: nothing scripted
    h, events = await run_with_recall(recall_model, InMemoryMemoryStore(), "hello")
    assert recall_model.calls == []
    assert memory_part(h.model.last_call) is None
    assert not [e for e in events if isinstance(e, MemoryRecalled)]
    assert isinstance(events[0], RunStarted)


async def test_recall_top_k_zero_asks_nobody() -> None:
    recall_model = ScriptedModel()
    h, events = await run_with_recall(recall_model, store_of(), "hello", top_k=0)
    assert recall_model.calls == []
    event = recalled(events)
    assert (event.method, event.names) == ("none", [])
    assert "recall_top_k is 0" in event.reason
    assert memory_part(h.model.last_call) is None


async def test_a_resumed_session_recalls_for_its_new_message() -> None:
    recall_model = ScriptedModel(
        [ScriptedResponse.text('["docs_wiki"]'), ScriptedResponse.text('["prefer_tabs"]')]
    )
    main = ScriptedModel([ScriptedResponse.text("one"), ScriptedResponse.text("two")])
    h = Harness(main)
    h.service.recall = MemoryRecall(store_of(), recall_model)
    first = await h.service.start("wiki?")
    await first.wait()
    second = await h.service.start("tabs?", session_id=first.session_id)
    await second.wait()
    text = memory_part(main.last_call)
    assert text is not None and TABS.body in text and DOCS.body not in text


async def test_the_users_message_is_scrubbed_before_the_recall_model_sees_it() -> None:
    recall_model = ScriptedModel([ScriptedResponse.text("[]")])
    recall = MemoryRecall(
        store_of(), recall_model, redactor=DictSecretRedactor({"API_KEY": "sk-secret-123456"})
    )
    chosen = await recall.recall("my key is sk-secret-123456, use tabs")
    assert chosen is not None and chosen.method == "model" and chosen.names == ()
    sent = recall_model.calls[0].messages[0].content[0].text  # type: ignore[union-attr]
    assert "sk-secret-123456" not in sent and "[redacted:API_KEY]" in sent


def many_memories(count: int) -> list[Memory]:
    topics = ["tabs", "wiki", "deploy", "tests", "review", "python", "docker", "ci", "api"]
    return [
        Memory(
            name=f"memory_{i:04d}",
            description=f"Note {i} about {topics[i % len(topics)]} and the team's habits",
            category=("user", "feedback", "reference")[i % 3],
            body=f"Body of memory {i}: " + "details " * 30,
        )
        for i in range(count)
    ]


def big_store(memories: list[Memory]) -> InMemoryMemoryStore:
    """A store of many memories, placed at once (writing each rebuilds the index)."""
    store = InMemoryMemoryStore()
    for memory in memories:
        store.put_file(memory)
    store.repair_index()
    return store


async def test_two_thousand_memories_stay_within_the_catalogue_and_context_budgets() -> None:
    store = big_store(
        [*many_memories(2000), Memory("zz_indent", "Indentation: kubernetes tabs", "user", "Tabs.")]
    )
    chosen_names = [f"memory_{i:04d}" for i in range(0, 50, 5)]
    recall_model = ScriptedModel([ScriptedResponse.text(str(chosen_names).replace("'", '"'))])
    recall = MemoryRecall(
        store,
        recall_model,
        RecallSettings(top_k=8, catalog_max_tokens=2000, context_tokens=1500),
    )
    chosen = await recall.recall("set up kubernetes with tabs")
    assert chosen is not None
    shown = recall_model.calls[0].messages[0].content[0].text  # type: ignore[union-attr]
    catalogue = shown.split("\n\nThe user's request:")[0]
    assert estimate_tokens(catalogue) <= 2000
    assert catalogue.splitlines()[1].startswith("- zz_indent [user]:")  # most relevant first
    assert "more memories, not listed)" in catalogue
    assert estimate_tokens(chosen.text) <= 1500
    assert chosen.method == "model" and 1 <= len(chosen.names) <= 8
    assert chosen.names == tuple(chosen_names[: len(chosen.names)])


async def test_two_thousand_memories_lexical_fallback_within_budget() -> None:
    store = big_store(many_memories(2000))
    recall = MemoryRecall(
        store,
        ScriptedModel([ScriptedResponse.text("no idea")]),
        RecallSettings(top_k=5, catalog_max_tokens=2000, context_tokens=800),
    )
    chosen = await recall.recall("docker")
    assert chosen is not None and chosen.method == "lexical"
    assert 1 <= len(chosen.names) <= 5
    assert estimate_tokens(chosen.text) <= 800
    assert all("docker" in (store.read(n).description) for n in chosen.names)


# --- the pieces ---------------------------------------------------------------------------------


def entry(name: str, description: str, updated: int = 0) -> MemoryEntry:
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(days=updated)
    return MemoryEntry(name, description, "user", f"user/{name}.md", when, when)


def test_terms_drop_stop_words_and_plurals() -> None:
    assert terms("The user ALWAYS uses tabs, never spaces!") == terms(
        "user always use tab never space"
    )
    assert "tab" in terms("Tabs") and "class" in terms("class") and terms("a to of the") == []


def test_lexical_order_ranks_matches_and_leaves_the_rest_out() -> None:
    entries = [
        entry("deploy_notes", "How we deploy"),
        entry("prefer_tabs", "Indent with tabs"),
        entry("tabs_and_more", "Tabs tabs tabs in every file", updated=3),
    ]
    order = lexical_order(entries, "tabs please")
    assert set(order) == {1, 2}
    assert lexical_order(entries, "nothing shared here") == []
    assert lexical_order(entries, "the and of") == []
    assert lexical_order([entry("one", "only tabs")], "tabs") == [0]  # a catalogue of one


def test_the_catalogue_lists_everything_when_it_fits() -> None:
    entries = [entry("a_one", "First"), entry("b_two", "Second")]
    text, listed = render_catalogue(entries, 100)
    assert listed == 2 and text.splitlines() == [
        CATALOGUE_HEADER,
        "- a_one [user]: First",
        "- b_two [user]: Second",
    ]
    assert render_catalogue(entries, 0) == ("", 0)


def test_render_memories_without_room_for_one_gives_nothing() -> None:
    assert render_memories([TABS], 5) == ("", [])
    text, held = render_memories([TABS], 1000)
    assert held == ["prefer_tabs"] and TABS.body in text


@pytest.mark.parametrize(
    ("answer", "names"),
    [
        ('["a", "b"]', ["a", "b"]),
        ('```json\n["a"]\n```', ["a"]),
        ('Here you go: ["a", "b"] hope it helps', ["a", "b"]),
        ('{"names": ["a"]}', ["a"]),
        ("[]", []),
        ("nothing", None),
        ("[1, 2]", None),
        ('{"a": 1}', None),
    ],
)
def test_parse_names(answer: str, names: list[str] | None) -> None:
    assert parse_names(answer) == names


async def test_an_unreadable_memory_folder_recalls_nothing_and_says_why() -> None:
    class Broken(InMemoryMemoryStore):
        def surely_empty(self) -> bool:
            return False  # something is in the folder's place

        def catalogue(self) -> Any:
            from soong_agent.ports.memory import MemoryPathRefused

            raise MemoryPathRefused("/x", "the memory folder is a file")

    recall = MemoryRecall(Broken(), ScriptedModel())
    chosen = await recall.recall("hi")
    assert chosen is not None and chosen.method == "none" and chosen.text == ""
    assert "could not be read" in chosen.reason


async def test_a_user_without_memories_costs_no_catalogue_read() -> None:
    class Untouched(InMemoryMemoryStore):
        def catalogue(self) -> Any:
            raise AssertionError("an empty memory folder is not read")

    model = ScriptedModel()
    assert await MemoryRecall(Untouched(), model).recall("hi") is None
    assert model.calls == []


async def test_a_file_in_the_memory_folders_place_is_reported(tmp_path: Path) -> None:
    from soong_agent.adapters.memory import FileMemoryStore

    (tmp_path / "memory").write_text("not a folder\n", encoding="utf-8")
    chosen = await MemoryRecall(FileMemoryStore(tmp_path / "memory"), ScriptedModel()).recall("hi")
    assert chosen is not None and chosen.text == ""
    assert "could not be read" in chosen.reason and "file" in chosen.reason


async def test_recall_does_not_block_the_loop_on_the_store() -> None:
    # the catalogue is read in a worker thread: another task runs meanwhile
    ticks: list[int] = []

    async def ticker() -> None:
        for i in range(3):
            ticks.append(i)
            await asyncio.sleep(0)

    recall = MemoryRecall(store_of(), ScriptedModel([ScriptedResponse.text("[]")]))
    await asyncio.gather(recall.recall("x"), ticker())
    assert ticks == [0, 1, 2]
