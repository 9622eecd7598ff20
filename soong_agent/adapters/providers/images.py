"""Images in request bodies (PROV-7): an image block's base64 text, made once per block, and
the text a model profile that is not shown images gets in an image's place."""

from __future__ import annotations

import base64

from soong_agent.ports.messages import ImageBlock

_B64_MAX = 64
_B64: dict[int, tuple[ImageBlock, str]] = {}
"""`b64` by the id of the block (kept alive with its text, so the id stays its own): every
request of a session sends its images again, and encoding megabytes each time adds up."""


def b64(block: ImageBlock) -> str:
    """The standard base64 text of the image's bytes."""
    hit = _B64.get(id(block))
    if hit is not None:
        return hit[1]
    text = base64.b64encode(block.data).decode("ascii")
    if len(_B64) >= _B64_MAX:
        _B64.clear()
    _B64[id(block)] = (block, text)
    return text


def data_url(block: ImageBlock) -> str:
    """The image as a `data:` URL (OpenAI's `image_url`)."""
    return f"data:{block.media_type};base64,{b64(block)}"


def unseen(block: ImageBlock) -> str:
    """What a model that is not shown images reads in the image's place."""
    where = f" {block.source}" if block.source else ""
    return (
        f"[an image{where} ({block.media_type}, {len(block.data)} bytes) is not shown: this "
        "model profile does not take images (model.vision = false)]"
    )


def attached_note(images: int, call_id: str, tool: str) -> str:
    """The text before the images of a tool result that the API takes only in a user message
    (OpenAI Chat and Ollama have no images in tool messages)."""
    what = "the image" if images == 1 else f"the {images} images"
    return f"[{what} that the {tool} call {call_id} returned]"
