"""Images over the model's byte budget are scaled down; unreadable ones are given up on."""

from __future__ import annotations

import io
import os

from PIL import Image

from gateway.agents.openai_media import MIN_SIDE, dimensions, fit_image


def noisy_jpeg(width: int, height: int) -> bytes:
    # Random pixels compress badly: a large file from a modest image.
    image = Image.frombytes("RGB", (width, height), os.urandom(width * height * 3))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=95)
    return buffer.getvalue()


def test_an_image_within_the_budget_is_sent_as_it_is() -> None:
    data = noisy_jpeg(100, 80)
    fitted = fit_image(data, "image/jpeg", len(data))
    assert fitted is not None
    assert (fitted.data, fitted.mime, fitted.width, fitted.height) == (data, "image/jpeg", 100, 80)


def test_a_larger_image_is_scaled_down_under_the_budget_keeping_its_shape() -> None:
    data = noisy_jpeg(1600, 1200)
    budget = len(data) // 4
    fitted = fit_image(data, "image/jpeg", budget)
    assert fitted is not None
    assert len(fitted.data) <= budget
    assert fitted.mime == "image/jpeg"
    assert fitted.width < 1600
    assert abs(fitted.width / fitted.height - 4 / 3) < 0.01
    assert dimensions(fitted.data) == (fitted.width, fitted.height)


def test_an_image_that_cannot_fit_or_be_read_is_given_up_on() -> None:
    assert fit_image(noisy_jpeg(MIN_SIDE * 2, MIN_SIDE * 2), "image/jpeg", 100) is None
    assert fit_image(b"not an image", "image/jpeg", 10) is None
    assert dimensions(b"not an image") is None


def test_a_transparent_image_stays_a_png() -> None:
    image = Image.frombytes("RGBA", (600, 600), os.urandom(600 * 600 * 4))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    data = buffer.getvalue()
    fitted = fit_image(data, "image/png", len(data) // 3)
    assert fitted is not None
    assert fitted.mime == "image/png"
