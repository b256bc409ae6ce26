"""Draws Hearth's icon (a flame on a warm rounded square) as SVG and as PNGs, from one set of
shapes, so the vector and the bitmaps agree.

    python installer/make_icons.py app/assets    # the SVG, a 256 px PNG, a .ico (committed)
    python installer/make_icons.py --hicolor DIR         # DIR/hicolor/<n>x<n>/apps/<id>.png ...

Needs Pillow (a dependency of Hearth).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from PIL import Image, ImageDraw

APP_ID = "io.github.hearth.Hearth"
SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
VIEW = 256  # the SVG's coordinate space
BACKGROUND = "#3b2418"
CORNER = 56

# Outer flame, inner flame: closed outlines as (x, y) in the 256 x 256 space, traced from a
# teardrop curve so that both renderings use the same points.


def _flame(cx: float, base: float, width: float, height: float, lean: float) -> list[tuple]:
    points = []
    for i in range(96):
        t = 2 * math.pi * i / 96
        # A teardrop: round at the bottom, pointed at the top, tip leaning sideways.
        x = math.sin(t) * (1 - math.cos(t)) / 2 * 1.3
        y = (1 + math.cos(t)) / 2  # 1 at the tip (t = 0), 0 at the bottom
        points.append((cx + x * width + lean * y * y * width, base - y * height))
    return [(round(x, 2), round(y, 2)) for x, y in points]


SHAPES = [
    ("#f2762e", _flame(128, 222, 110, 190, 0.25)),
    ("#ffc94a", _flame(128, 222, 60, 105, -0.2)),
]


def svg() -> str:
    polys = "\n".join(
        f'  <polygon fill="{color}" points="{" ".join(f"{x},{y}" for x, y in pts)}"/>'
        for color, pts in SHAPES
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{VIEW}" height="{VIEW}" '
        f'viewBox="0 0 {VIEW} {VIEW}">\n'
        f'  <rect x="8" y="8" width="240" height="240" rx="{CORNER}" fill="{BACKGROUND}"/>\n'
        f"{polys}\n</svg>\n"
    )


def png(size: int) -> Image.Image:
    """The icon at `size` pixels (drawn at 4x, then downscaled: smooth edges)."""
    big = size * 4
    scale = big / VIEW
    img = Image.new("RGBA", (big, big), (0, 0, 0, 0))
    draw = ImageDraw.Draw(img)
    draw.rounded_rectangle(
        (8 * scale, 8 * scale, 248 * scale, 248 * scale), CORNER * scale, fill=BACKGROUND
    )
    for color, pts in SHAPES:
        draw.polygon([(x * scale, y * scale) for x, y in pts], fill=color)
    return img.resize((size, size), Image.LANCZOS)


def write_hicolor(root: Path) -> list[Path]:
    """`root`/hicolor/<n>x<n>/apps/<id>.png for every size, and scalable/apps/<id>.svg."""
    written = []
    for size in SIZES:
        path = root / "hicolor" / f"{size}x{size}" / "apps" / f"{APP_ID}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        png(size).save(path)
        written.append(path)
    path = root / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(svg())
    return [*written, path]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--hicolor", action="store_true", help="write a hicolor icon theme tree")
    args = p.parse_args()
    if args.hicolor:
        write_hicolor(args.folder)
        return
    args.folder.mkdir(parents=True, exist_ok=True)
    (args.folder / f"{APP_ID}.svg").write_text(svg())
    png(256).save(args.folder / f"{APP_ID}.png")
    # Windows: the installer's icon (Inno Setup's SetupIconFile), several sizes in one file.
    png(256).save(args.folder / f"{APP_ID}.ico", sizes=[(n, n) for n in (16, 32, 48, 256)])


if __name__ == "__main__":
    main()
