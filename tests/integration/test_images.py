"""Images (PROV-7): each provider's wire format for images in user messages and in tool
results, a text-only profile's clear refusal, `read_file` on image files, and
`runtime.run(message, images=[...])` through the SDK to the strict loopback fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from soong_agent import AgentRuntime, UsageError
from soong_agent.adapters.providers.anthropic_messages import AnthropicMessagesProvider
from soong_agent.adapters.providers.ollama_chat import OllamaChatProvider
from soong_agent.adapters.providers.openai_chat import OpenAIChatProvider
from soong_agent.adapters.providers.retry import RetryPolicy
from soong_agent.application.tools.base import ToolContext
from soong_agent.application.tools.files import ImageReading, ReadFileArgs, read_file
from soong_agent.domain.images import accepts_images, sniff_image, vision_by_name
from soong_agent.entrypoints.sdk import read_images
from soong_agent.ports.messages import (
    ImageBlock,
    Message,
    PromptWithImages,
    ToolCallBlock,
    ToolResultBlock,
    user_text,
)
from soong_agent.ports.model import ModelProvider, ModelRequest
from soong_agent.testing import InMemoryFileSystem
from tests.support import fake_anthropic, fake_ollama, fake_openai
from tests.support.fake_anthropic import FakeAnthropicServer, validate_messages_request
from tests.support.fake_ollama import FakeOllamaServer
from tests.support.fake_openai import FakeOpenAIServer, validate_chat_request
from tests.support.images import GIF, JPEG, PNG, PNG_B64, WEBP

PNG_BLOCK = ImageBlock(media_type="image/png", data=PNG, source="shot.png")


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient() as c:
        yield c


def common(client: httpx.AsyncClient, base_url: str, model: str) -> dict[str, Any]:
    return {
        "client": client,
        "base_url": base_url,
        "model": model,
        "api_key": lambda: None,
        "retry": RetryPolicy(max_attempts=1),
        "timeout_s": 10,
    }


async def send(provider: ModelProvider, messages: list[Message]) -> None:
    _ = [e async for e in provider.stream(ModelRequest(system=[], messages=messages))]


def with_image() -> list[Message]:
    return [user_text(PromptWithImages("what is on this screenshot?", [PNG_BLOCK]))]


def read_loop() -> list[Message]:
    """read_file on an image: the call and its result with the image."""
    return [
        user_text("look at shot.png"),
        Message(
            role="assistant",
            content=[ToolCallBlock(id="call_1", name="read_file", arguments='{"path":"shot.png"}')],
        ),
        Message(
            role="tool",
            content=[
                ToolResultBlock(
                    call_id="call_1",
                    name="read_file",
                    content="shot.png: image/png image, 70 bytes.",
                    images=(PNG_BLOCK,),
                )
            ],
        ),
    ]


# --- the three wire formats -----------------------------------------------------------------


async def test_anthropic_images_in_user_turns_and_tool_results(client: httpx.AsyncClient) -> None:
    image = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": PNG_B64},
    }
    with FakeAnthropicServer() as server:
        server.enqueue(fake_anthropic.text_response("a cat"), fake_anthropic.text_response("ok"))
        provider = AnthropicMessagesProvider(**common(client, server.base_url, "claude-sonnet-4-5"))
        await send(provider, with_image())
        await send(provider, read_loop())
        first, second = (r.json for r in server.requests)
        assert server.rejections == []
    assert first["messages"][0]["content"][0] == image  # the image before the text
    assert first["messages"][0]["content"][1]["text"] == "what is on this screenshot?"
    [result] = second["messages"][2]["content"]
    assert result["content"] == [
        {"type": "text", "text": "shot.png: image/png image, 70 bytes."},
        image,
    ]


async def test_openai_images_as_data_urls_and_after_the_tool_messages(
    client: httpx.AsyncClient,
) -> None:
    url = f"data:image/png;base64,{PNG_B64}"
    with FakeOpenAIServer() as server:  # strict: tool messages take only text
        server.enqueue(fake_openai.text_response("a cat"), fake_openai.text_response("ok"))
        provider = OpenAIChatProvider(**common(client, server.base_url, "gpt-4o"))
        await send(provider, with_image())
        await send(provider, read_loop())
        first, second = (r.json for r in server.requests)
        assert server.rejections == []
    assert first["messages"][0] == {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": url}},
            {"type": "text", "text": "what is on this screenshot?"},
        ],
    }
    assert second["messages"][2] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "shot.png: image/png image, 70 bytes.",
    }
    assert second["messages"][3] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "[the image that the read_file call call_1 returned]"},
            {"type": "image_url", "image_url": {"url": url}},
        ],
    }


async def test_ollama_images_as_base64_lists(client: httpx.AsyncClient) -> None:
    with FakeOllamaServer() as server:
        server.enqueue(fake_ollama.text_response("a cat"), fake_ollama.text_response("ok"))
        provider = OllamaChatProvider(**common(client, server.base_url, "llava:13b"))
        await send(provider, with_image())
        await send(provider, read_loop())
        first, second = (r.json for r in server.requests)
        assert server.rejections == []
    assert first["messages"][0] == {
        "role": "user",
        "content": "what is on this screenshot?",
        "images": [PNG_B64],
    }
    assert second["messages"][2] == {
        "role": "tool",
        "content": "shot.png: image/png image, 70 bytes.",
        "tool_name": "read_file",
    }
    assert second["messages"][3] == {
        "role": "user",
        "content": "[the image that the read_file call call_1 returned]",
        "images": [PNG_B64],
    }


@pytest.mark.parametrize("kind", ["openai", "anthropic", "ollama"])
async def test_a_text_only_profile_gets_a_line_of_text_in_place_of_an_image(
    client: httpx.AsyncClient, kind: str
) -> None:
    # a session that holds images, resumed with a model that is not shown images
    servers = {
        "openai": FakeOpenAIServer,
        "anthropic": FakeAnthropicServer,
        "ollama": FakeOllamaServer,
    }
    builders: dict[str, Any] = {
        "openai": fake_openai,
        "anthropic": fake_anthropic,
        "ollama": fake_ollama,
    }
    providers: dict[str, Any] = {
        "openai": OpenAIChatProvider,
        "anthropic": AnthropicMessagesProvider,
        "ollama": OllamaChatProvider,
    }
    with servers[kind]() as server:
        server.enqueue(builders[kind].text_response("ok"))
        provider = providers[kind](**common(client, server.base_url, "text-model"), vision=False)
        await send(provider, [*with_image(), *read_loop()[1:]])
        [sent] = server.requests
        assert server.rejections == []
    raw = sent.body.decode()
    assert PNG_B64 not in raw and "image_url" not in raw and '"images"' not in raw
    assert raw.count("model.vision = false") == 2
    assert "shot.png" in raw


def test_the_strict_fakes_refuse_what_the_apis_refuse() -> None:
    def anthropic(media_type: str, data: str) -> list[str]:
        block = {
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }
        body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": [block]}]}
        return validate_messages_request(json_bytes(body))

    assert anthropic("image/png", PNG_B64) == []
    assert (
        "does not match the provided media type image/jpeg" in anthropic("image/jpeg", PNG_B64)[0]
    )
    assert "not valid base64" in anthropic("image/png", "not base64!")[0]
    assert "Input should be 'image/jpeg'" in anthropic("image/bmp", PNG_B64)[0]

    def openai(role: str, url: str) -> list[str]:
        part = {"type": "image_url", "image_url": {"url": url}}
        messages: list[dict[str, Any]] = [{"role": role, "content": [part]}]
        return [
            p.message
            for p in validate_chat_request(json_bytes({"model": "m", "messages": messages}))
        ]

    assert openai("user", f"data:image/png;base64,{PNG_B64}") == []
    assert "unsupported image" in openai("user", "data:image/png;base64,aGk=")[0]
    assert "'image_url'" in openai("system", f"data:image/png;base64,{PNG_B64}")[0]


def json_bytes(body: dict[str, Any]) -> bytes:
    import json

    return json.dumps(body).encode()


# --- the vision table and the formats -------------------------------------------------------


def test_formats_are_told_by_their_bytes_and_vision_by_the_model_name() -> None:
    assert [sniff_image(b[:16]) for b in (PNG, JPEG, GIF, WEBP)] == [
        "image/png",
        "image/jpeg",
        "image/gif",
        "image/webp",
    ]
    assert sniff_image(b"BM\x00\x00 a bitmap") is None
    for name in (
        "gpt-4o-mini",
        "openai/gpt-4.1",
        "claude-3-5-sonnet-latest",
        "claude-sonnet-4-5",
        "llava:13b",
        "gemma3:27b",
        "qwen2.5vl:7b",
    ):
        assert vision_by_name(name), name
    for name in ("gpt-3.5-turbo", "o3-mini", "deepseek-chat", "llama3.1:8b", "qwen3:8b", ""):
        assert not vision_by_name(name), name
    assert accepts_images("llama3.1:8b", True) and not accepts_images("gpt-4o", False)


# --- read_file ------------------------------------------------------------------------------


def ctx_with(files: dict[str, str | bytes]) -> ToolContext:
    return ToolContext(fs=InMemoryFileSystem(files), session_id="ses_1", run_id="run_1")


async def test_read_file_returns_an_image_block_for_a_vision_profile() -> None:
    ctx = ctx_with({"shot.png": PNG, "pic.jpg": JPEG})
    output = await read_file(
        ReadFileArgs(path="shot.png"), ctx, ImageReading(vision=True, max_bytes=1000)
    )
    assert not output.is_error
    assert output.content == "shot.png: image/png image, 70 bytes."
    assert output.images == (ImageBlock(media_type="image/png", data=PNG, source="shot.png"),)
    jpeg = await read_file(
        ReadFileArgs(path="pic.jpg"), ctx, ImageReading(vision=True, max_bytes=1000)
    )
    assert jpeg.images[0].media_type == "image/jpeg"


async def test_read_file_refuses_an_image_clearly_for_a_text_only_profile() -> None:
    ctx = ctx_with({"shot.png": PNG})
    output = await read_file(
        ReadFileArgs(path="shot.png"), ctx, ImageReading(vision=False, max_bytes=1000)
    )
    assert output.is_error and output.images == ()
    assert "model.vision = false" in output.content and "shot.png" in output.content


async def test_read_file_refuses_an_image_over_the_cap_with_its_size() -> None:
    ctx = ctx_with({"shot.png": PNG})
    output = await read_file(
        ReadFileArgs(path="shot.png"), ctx, ImageReading(vision=True, max_bytes=50)
    )
    assert output.is_error and output.images == ()
    assert "70 bytes" in output.content and "tools.max_image_bytes" in output.content


async def test_read_file_reads_a_misnamed_file_as_before() -> None:
    ctx = ctx_with({"notes.png": "just text\n"})
    output = await read_file(
        ReadFileArgs(path="notes.png"), ctx, ImageReading(vision=True, max_bytes=1000)
    )
    assert output.images == () and "just text" in output.content


# --- the SDK --------------------------------------------------------------------------------


def write_config(home: Path, provider: str, base_url: str, name: str, extra: str = "") -> None:
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(
        f'[model]\nprovider = "{provider}"\nbase_url = "{base_url}"\napi_key_env = ""\n'
        f'name = "{name}"\n' + extra,
        encoding="utf-8",
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


@pytest.mark.parametrize("kind", ["openai", "anthropic", "ollama"])
async def test_run_with_images_attaches_them_and_stores_them(
    tmp_path: Path, project: Path, kind: str
) -> None:
    (tmp_path / "shot.png").write_bytes(PNG)
    servers = {
        "openai": FakeOpenAIServer,
        "anthropic": FakeAnthropicServer,
        "ollama": FakeOllamaServer,
    }
    builders: dict[str, Any] = {
        "openai": fake_openai,
        "anthropic": fake_anthropic,
        "ollama": fake_ollama,
    }
    names = {"openai": "gpt-4o", "anthropic": "claude-sonnet-4-5", "ollama": "llava:7b"}
    with servers[kind]() as server:
        write_config(tmp_path / "home", kind, server.base_url, names[kind])
        server.enqueue(builders[kind].text_response("A tiny image."))
        async with AgentRuntime(project_dir=project, home=tmp_path / "home") as runtime:
            run = await runtime.run("what is this?", images=[tmp_path / "shot.png"])
            result = await run.wait()
            stored = await runtime.session_messages(run.session_id)
        assert server.rejections == []
        body = server.requests[0].body.decode()
    assert result.status == "completed"
    assert PNG_B64 in body
    first = stored[0]
    assert first.images == [
        ImageBlock(media_type="image/png", data=PNG, source=str(tmp_path / "shot.png"))
    ]
    assert first.text == "what is this?"


async def test_run_with_images_refuses_what_it_cannot_attach(tmp_path: Path, project: Path) -> None:
    (tmp_path / "shot.png").write_bytes(PNG)
    (tmp_path / "notes.txt").write_text("text", encoding="utf-8")
    home = tmp_path / "home"
    write_config(
        home, "openai", "http://127.0.0.1:9/v1", "gpt-4o", "[tools]\nmax_image_bytes = 60\n"
    )
    async with AgentRuntime(project_dir=project, home=home) as runtime:
        with pytest.raises(UsageError, match=r"more than tools\.max_image_bytes"):
            await runtime.run("see", images=[tmp_path / "shot.png"])
        with pytest.raises(UsageError, match="is not a PNG, JPEG, GIF or WebP image"):
            await runtime.run("see", images=[tmp_path / "notes.txt"])
        with pytest.raises(UsageError, match="no such file"):
            await runtime.run("see", images=[tmp_path / "missing.png"])
    text_only = tmp_path / "home2"
    write_config(text_only, "openai", "http://127.0.0.1:9/v1", "gpt-3.5-turbo")
    async with AgentRuntime(project_dir=project, home=text_only) as runtime:
        with pytest.raises(UsageError, match=r"model.vision"):
            await runtime.run("see", images=[tmp_path / "shot.png"])
    write_config(text_only, "openai", "http://127.0.0.1:9/v1", "gpt-3.5-turbo", "vision = true\n")
    async with AgentRuntime(project_dir=project, home=text_only) as runtime:
        [block] = read_images([tmp_path / "shot.png"], runtime.loaded)  # vision = true: taken
    assert block.data == PNG


@pytest.mark.parametrize(("name", "shown"), [("claude-sonnet-4-5", True), ("claude-2.1", False)])
async def test_read_file_on_an_image_through_the_sdk(
    tmp_path: Path, project: Path, name: str, shown: bool
) -> None:
    (project / "shot.png").write_bytes(PNG)
    with FakeAnthropicServer() as server:
        write_config(tmp_path / "home", "anthropic", server.base_url, name)
        server.enqueue(
            fake_anthropic.tool_call_response([("toolu_1", "read_file", '{"path": "shot.png"}')]),
            fake_anthropic.text_response("A tiny image."),
        )
        async with AgentRuntime(project_dir=project, home=tmp_path / "home") as runtime:
            result = await (await runtime.run("look at shot.png")).wait()
        assert server.rejections == []
        [answered] = server.requests[1].json["messages"][2]["content"]
    assert result.status == "completed"
    if shown:
        assert answered["content"][-1]["source"]["data"] == PNG_B64
        assert "is_error" not in answered
    else:
        assert answered["is_error"] is True
        assert "model.vision = false" in answered["content"]
