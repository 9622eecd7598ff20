"""Small real images for tests: the bytes of a 1x1 PNG and GIF, and headers of JPEG and WebP
files (what the strict fakes and `domain.images.sniff_image` look at)."""

from __future__ import annotations

import base64

PNG_B64 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
PNG = base64.b64decode(PNG_B64)
"""A 1x1 PNG (70 bytes)."""
GIF = base64.b64decode("R0lGODlhAQABAIAAAP///wAAACH5BAEAAAAALAAAAAABAAEAAAICRAEAOw==")
"""A 1x1 GIF."""
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00\xff\xd9"
"""The start and end markers of a JPEG file (enough for format checks)."""
WEBP = (
    b"RIFF\x1a\x00\x00\x00WEBPVP8L\x0d\x00\x00\x00"
    b"\x2f\x00\x00\x00\x10\x07\x10\x11\x11\x88\x88\xfe\x07\x00"
)
"""A 1x1 lossless WebP."""
