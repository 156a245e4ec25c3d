"""Images made small enough for a model: scaled down with Pillow when over a byte budget.

Vision APIs take images up to a few megabytes, and a phone photo is often more. An image over
the budget is scaled down (and re-encoded as JPEG, or PNG when it has transparency) in steps
until it fits; one that cannot be read, or still does not fit at a small size, is given up on,
and the caller names it in text instead. Pillow's work is blocking: call these off the event loop.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

#: Below this longest side a scaled image no longer shows enough to be worth sending.
MIN_SIDE = 256
_STEP = 0.7
_JPEG_QUALITY = 85


@dataclass(frozen=True, slots=True)
class FittedImage:
    data: bytes
    mime: str
    width: int
    height: int


def dimensions(data: bytes) -> tuple[int, int] | None:
    """(width, height), read from the header only; None when it is not an image Pillow reads."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.size
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError):
        return None


def fit_image(data: bytes, mime: str, max_bytes: int) -> FittedImage | None:
    """`data` itself when within `max_bytes`, else a scaled-down copy that is; None when the
    image cannot be read or does not fit even at `MIN_SIDE` pixels."""
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if len(data) <= max_bytes:
                return FittedImage(data, mime, width, height)
            image.load()
            return _scaled_down(image, max_bytes)
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError):
        return None


def _scaled_down(image: Image.Image, max_bytes: int) -> FittedImage | None:
    transparent = image.mode in ("RGBA", "LA", "PA") or "transparency" in image.info
    mode, image_format, mime = (
        ("RGBA", "PNG", "image/png")
        if transparent
        else (
            "RGB",
            "JPEG",
            "image/jpeg",
        )
    )
    source = image.convert(mode)
    scale = 1.0
    while True:
        width = max(1, round(source.width * scale))
        height = max(1, round(source.height * scale))
        if max(width, height) < MIN_SIDE:
            return None
        resized = (
            source if scale == 1.0 else source.resize((width, height), Image.Resampling.LANCZOS)
        )
        buffer = io.BytesIO()
        if image_format == "JPEG":
            resized.save(buffer, "JPEG", quality=_JPEG_QUALITY, optimize=True)
        else:
            resized.save(buffer, "PNG", optimize=True)
        if buffer.tell() <= max_bytes:
            return FittedImage(buffer.getvalue(), mime, width, height)
        scale *= _STEP
