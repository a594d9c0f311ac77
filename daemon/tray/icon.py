"""The tray icon's picture: a disc whose colour is the health score's band.

Kept apart from the tray so it can be drawn and checked without a display.
Bands are deliberately coarse (three plus "unknown"): a colour change should
mean "look at this", not flicker with every point of the score.
"""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image, ImageDraw

ICON_SIZE = 64


@dataclass(frozen=True)
class Band:
    name: str
    rgb: tuple[int, int, int]


GOOD = Band("good", (46, 158, 79))
FAIR = Band("fair", (224, 160, 32))
POOR = Band("poor", (210, 60, 60))
UNKNOWN = Band("unknown", (138, 138, 138))  # loading, or the daemon did not answer
BANDS = (GOOD, FAIR, POOR, UNKNOWN)

DEFAULT_GOOD_FROM = 75
DEFAULT_FAIR_FROM = 50


def health_band(
    score: float | None, good_from: float = DEFAULT_GOOD_FROM, fair_from: float = DEFAULT_FAIR_FROM
) -> Band:
    """The band of a 0-100 health score; ``None`` (no score yet) is UNKNOWN."""
    if score is None:
        return UNKNOWN
    if score >= good_from:
        return GOOD
    if score >= fair_from:
        return FAIR
    return POOR


def draw_icon(band: Band, paused: bool = False, size: int = ICON_SIZE) -> Image.Image:
    """A filled disc in the band colour; two white bars on it while watching is paused."""
    image = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    margin = max(1, size // 16)
    outline = tuple(max(0, c - 60) for c in band.rgb)
    draw.ellipse(
        (margin, margin, size - margin - 1, size - margin - 1),
        fill=(*band.rgb, 255),
        outline=(*outline, 255),
        width=max(1, size // 20),
    )
    if paused:
        bar_w, bar_h = size // 8, size // 3
        top = (size - bar_h) // 2
        for left in (size // 2 - bar_w - size // 16, size // 2 + size // 16):
            draw.rectangle((left, top, left + bar_w, top + bar_h), fill=(255, 255, 255, 255))
    return image
