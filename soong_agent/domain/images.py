"""Images a model is shown (PROV-7): which formats are taken, how a file's format is told from
its first bytes, and which models see images when `[model] vision` is unset."""

from __future__ import annotations

from soong_agent.ports.messages import ImageType

IMAGE_TYPES: dict[str, ImageType] = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
"""The file name endings of the formats every provider takes."""

FORMATS = "PNG, JPEG, GIF or WebP"


def sniff_image(head: bytes) -> ImageType | None:
    """The format of an image whose file starts with `head` (16 bytes are enough); None
    when it is none of PNG, JPEG, GIF and WebP. Providers refuse an image whose bytes do not
    match its declared type, so the bytes decide, never the name."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if len(head) >= 12 and head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "image/webp"
    return None


def looks_like_image(path: str) -> bool:
    """Whether `path` names a file of an image format by its ending (case-insensitive)."""
    dot = path.rfind(".")
    return dot >= 0 and path[dot:].lower() in IMAGE_TYPES


# Model names (after a gateway's "vendor/" prefix, lower-case) that take images, by prefix.
# Kept small: what a name cannot tell, `[model] vision = true|false` says.
VISION_PREFIXES: tuple[str, ...] = (
    # OpenAI
    "gpt-4o",
    "chatgpt-4o",
    "gpt-4.1",
    "gpt-4.5",
    "gpt-4-turbo",
    "gpt-4-vision",
    "gpt-5",
    "o1",
    "o3",
    "o4",
    # Anthropic: every Claude from 3 on
    "claude-3",
    "claude-sonnet-4",
    "claude-opus-4",
    "claude-haiku-4",
    "claude-4",
    # Google, through OpenAI-compatible endpoints
    "gemini",
    # local models (Ollama, llama.cpp, vLLM)
    "llava",
    "bakllava",
    "llama3.2-vision",
    "llama-3.2-11b-vision",
    "llama-3.2-90b-vision",
    "llama4",
    "gemma3",
    "qwen2.5vl",
    "qwen2.5-vl",
    "qwen2-vl",
    "qwen3-vl",
    "qwen-vl",
    "minicpm-v",
    "moondream",
    "granite3.2-vision",
    "pixtral",
    "mistral-small3.1",
    "mistral-small3.2",
)
TEXT_ONLY_PREFIXES: tuple[str, ...] = ("o1-mini", "o1-preview", "o3-mini", "gemma3:1b")
"""Names inside a vision family that do not take images (checked first)."""


def vision_by_name(model: str) -> bool:
    """Whether the model named `model` takes images, by the table above (unknown: False)."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    if name.startswith(TEXT_ONLY_PREFIXES):
        return False
    return name.startswith(VISION_PREFIXES)


def accepts_images(model: str, vision: bool | None) -> bool:
    """Whether a model profile is shown images: `[model] vision` when set, else by name."""
    return vision if vision is not None else vision_by_name(model)
