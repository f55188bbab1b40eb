"""``domaindigits28``, ``domaindigits32`` and ``domaindigits8``: digits in ten visual domains, rendered offline.

Not a paper dataset. It stands in for the papers' image datasets where those cannot be had (no
download here): ten classes of digits at the shapes of MNIST/FashionMNIST (1x28x28) and SVHN/CIFAR-10
(3x32x32), and at the 1x8x8 of the embedded digits that the cheapest CPU proxies' networks take, in
**domains** — styles of colour, background texture, stroke, font family, geometry, blur and noise — so
that clients can differ in what their images look like (covariate shift), not only in their labels.
Each image's domain id is stored with it (``train_domain`` / ``test_domain``), the domain table in the
manifest's ``source["domains"]``.

How an image is made (:func:`render_canvas`, then :func:`to_output`), all from the named stream
``(seed, "domaindigits", split, i)`` of image ``i``:

1. the glyph of its class: a font's digit (the TrueType fonts matplotlib ships, and the font Pillow
   embeds), or a scikit-learn handwritten digit upscaled (train images from the 1,347 bitmaps of the
   ``digits`` train split, test images from its 450 test bitmaps, so none is shared), drawn white on
   black at 64x64 with a random height and stroke, possibly with neighbouring digits on both sides
   (as house numbers are cropped), then rotated, sheared and shifted by one affine map;
2. composed with the domain's ink and paper colours (palette entries jittered) over its background
   texture, with an outline or a shadow where the domain has one, and blurred;
3. reduced to the output size by box averaging (32x32 RGB; or 28x28, converted to grey with
   ITU-R 601 luma), Gaussian pixel noise added, rounded to uint8.

Every domain draws its ink darker than its paper, in every colour channel. Polarity is deliberately not a
style: with light-on-dark domains among dark-on-light ones, the proxies' small CNNs under FedAvg stayed at
chance for hundreds of local steps (measured while designing this generator; ``docs/datasets.md``).

Both variants come from the same draws (the same glyph, style and geometry for image ``i``); only the
last step differs. Classes and domains are balanced: each (domain, class) cell holds
``N / (domains x classes)`` images of each split (:func:`layout`); sizes are a parameter
(:func:`register_domain_digits`), and a smaller split is a prefix of a larger one. Fonts are rendered
with Pillow's basic layout (no text shaping library), so the bytes depend only on the locked Pillow
(and the FreeType it bundles), matplotlib (the font files, whose sha256 the manifest records),
scikit-learn and numpy.

:data:`VERSION` names the generator: any change to what it produces bumps it, and
``tests/test_domaindigits.py`` pins the sha256 of a small build to the version.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from bench.data.prepared import PreparedDataset, channel_stats
from bench.data.registry import DatasetSpec, register_dataset
from bench.errors import BenchError
from bench.fileio import sha256_file
from bench.rng import numpy_stream

if TYPE_CHECKING:  # Pillow is imported where images are drawn (not by every `bench` command)
    from PIL.Image import Image as PILImage
    from PIL.ImageFont import FreeTypeFont
    from PIL.ImageFont import ImageFont as BitmapFont

VERSION = "1"
SEED = 0
NUM_CLASSES = 10
NUM_TRAIN, NUM_TEST = 12_000, 3_000
CANVAS = 64  # rendering size; reduced to the output size at the end
SHADOW_OFFSET = 3  # canvas pixels
MIN_CHANNEL_GAP = 20  # how much darker than the paper a palette ink is, at least, in every channel
HANDWRITTEN = "sklearn-digits"  # the glyph source that is scikit-learn's handwritten digits
PILLOW_FONT = "pillow-default"  # the font Pillow embeds (ImageFont.load_default)

RGB = tuple[int, int, int]
Texture = Literal["flat", "speckle", "grid", "ruled", "halftone", "clouds"]


@dataclass(frozen=True)
class Domain:
    """One visual style. Ranges are (low, high), drawn uniformly per image; palettes are drawn from and
    each channel jittered by ``jitter``; ``ink=None`` draws random colours (:func:`_colours`). Every
    domain's ink is darker than its paper in every channel (see the module's docstring)."""

    name: str
    glyphs: tuple[str, ...]              # font files in matplotlib's mpl-data/fonts/ttf, PILLOW_FONT, HANDWRITTEN
    ink: tuple[RGB, ...] | None
    paper: tuple[RGB, ...]
    texture: Texture
    height: tuple[float, float]          # glyph height, a share of the canvas
    stroke: tuple[int, int]              # extra stroke width in canvas pixels (integers, both ends included)
    rotation: float                      # largest |angle| in degrees
    shear: float                         # largest |horizontal shear|
    shift: float                         # largest |offset| of the glyph centre, a share of the canvas
    blur: tuple[float, float]            # Gaussian radius in canvas pixels
    noise: float                         # std of the pixel noise at the output, in 0..255 units
    neighbours: float = 0.0              # probability of neighbouring digits on both sides
    outline: tuple[RGB, ...] = ()        # an outline of this colour around the ink (sticker lettering)
    shadow: float = 0.0                  # opacity of a ghost of the ink, offset down and right (an LCD's)
    jitter: float = 12.0
    texture_strength: float = 30.0       # amplitude of the texture in 0..255 units


DOMAINS: tuple[Domain, ...] = (
    Domain("print", ("DejaVuSans.ttf", "DejaVuSerif.ttf", "cmr10.ttf", "STIXGeneral.ttf"),
           ink=((20, 20, 20), (40, 40, 60)), paper=((250, 250, 245), (235, 232, 220)), texture="flat",
           height=(0.45, 0.7), stroke=(0, 1), rotation=12, shear=0.15, shift=0.08, blur=(0.3, 1.0), noise=10,
           neighbours=0.3),
    Domain("poster", ("DejaVuSans-Bold.ttf", "DejaVuSerif-Bold.ttf", "STIXGeneralBol.ttf", "cmb10.ttf"),
           ink=((200, 30, 30), (30, 60, 180), (20, 130, 50), (120, 30, 140)),
           paper=((250, 240, 200), (230, 240, 250), (245, 245, 245)), texture="clouds",
           height=(0.45, 0.7), stroke=(1, 3), rotation=15, shear=0.2, shift=0.08, blur=(0.3, 1.0), noise=10,
           neighbours=0.3),
    Domain("pencil", ("DejaVuSerif-Italic.ttf", "STIXGeneralItalic.ttf", "cmti10.ttf", "DejaVuSans-Oblique.ttf"),
           ink=((70, 70, 75), (90, 85, 80)), paper=((200, 170, 125), (185, 160, 120), (210, 190, 150)),
           texture="speckle", height=(0.45, 0.7), stroke=(1, 2), rotation=15, shear=0.2, shift=0.08,
           blur=(0.6, 1.4), noise=14, neighbours=0.3, texture_strength=45),
    Domain("lcd", ("DejaVuSansMono.ttf", "cmtt10.ttf", PILLOW_FONT, "cmss10.ttf"),
           ink=((35, 45, 35), (25, 35, 45)), paper=((150, 170, 130), (140, 165, 150), (165, 175, 120)),
           texture="flat", height=(0.45, 0.7), stroke=(0, 2), rotation=12, shear=0.15, shift=0.08, blur=(0.3, 1.0),
           noise=12, neighbours=0.3, shadow=0.35, texture_strength=20),
    Domain("diazo", ("DejaVuSansMono-Oblique.ttf", "DejaVuSansMono.ttf", "cmtt10.ttf", "cmss10.ttf"),
           ink=((20, 50, 140), (30, 30, 120)), paper=((225, 235, 250), (235, 240, 250)),
           texture="grid", height=(0.45, 0.7), stroke=(0, 1), rotation=12, shear=0.25, shift=0.08,
           blur=(0.3, 1.0), noise=12, neighbours=0.3, texture_strength=45),
    Domain("handwriting", (HANDWRITTEN,), ink=((20, 30, 120), (10, 10, 10), (60, 20, 90)),
           paper=((250, 250, 240), (245, 245, 250)), texture="ruled", height=(0.5, 0.75), stroke=(0, 2),
           rotation=20, shear=0.3, shift=0.08, blur=(0.3, 1.0), noise=12, neighbours=0.3, texture_strength=80),
    Domain("sticker", ("DejaVuSans-BoldOblique.ttf", "DejaVuSansMono-Bold.ttf", "DejaVuSerif-BoldItalic.ttf",
                       "STIXGeneralBolIta.ttf"),
           ink=((90, 10, 10), (20, 20, 20), (20, 70, 35)), paper=((150, 150, 145), (125, 120, 115)),
           texture="clouds", height=(0.45, 0.7), stroke=(2, 3), rotation=15, shear=0.2, shift=0.08,
           blur=(0.3, 1.0), noise=14, neighbours=0.3, outline=((245, 245, 245), (235, 225, 160)),
           texture_strength=50),
    Domain("fog", ("DejaVuSans.ttf", "DejaVuSerif.ttf", "cmss10.ttf", PILLOW_FONT),
           ink=((95, 95, 100), (80, 85, 90)), paper=((150, 150, 155), (140, 145, 150)), texture="clouds",
           height=(0.45, 0.7), stroke=(0, 2), rotation=12, shear=0.15, shift=0.08, blur=(1.2, 2.2), noise=12,
           neighbours=0.3, jitter=6, texture_strength=25),
    Domain("street", ("DejaVuSans-Bold.ttf", "DejaVuSansMono-Bold.ttf", "DejaVuSerif-Bold.ttf", PILLOW_FONT,
                      "cmb10.ttf", "STIXGeneralBol.ttf"),
           ink=None, paper=(), texture="clouds", height=(0.5, 0.8), stroke=(0, 2), rotation=10, shear=0.3,
           shift=0.06, blur=(0.3, 1.2), noise=14, neighbours=0.9, texture_strength=40),
    Domain("newsprint", ("DejaVuSerif.ttf", "STIXGeneral.ttf", "cmr10.ttf", "DejaVuSerif-Italic.ttf",
                         "DejaVuSansMono-BoldOblique.ttf"),
           ink=((25, 25, 25),), paper=((205, 200, 190), (215, 210, 195)), texture="halftone", height=(0.45, 0.7),
           stroke=(0, 1), rotation=12, shear=0.2, shift=0.08, blur=(0.3, 1.0), noise=14, neighbours=0.3,
           texture_strength=70),
)


@dataclass(frozen=True)
class Recipe:
    """Everything image ``i`` of a split is made from (its draws, before any pixel)."""

    label: int
    domain: int
    glyph: str
    bitmap: int                  # the handwritten bitmap (index into the split's bitmaps), -1 for fonts
    left: int                    # neighbouring digits (-1: none)
    right: int
    height: float                # canvas pixels
    stroke: int
    angle: float                 # degrees
    shear: float
    dx: float
    dy: float
    blur: float
    ink: RGB
    paper: RGB
    outline: RGB | None


# ----------------------------------------------------------------------------------------------
# Glyph sources


def font_path(name: str) -> Path:
    """The font file ``name`` in matplotlib's data folder (BenchError naming the fix if it is absent)."""
    import matplotlib

    path = Path(matplotlib.get_data_path(), "fonts", "ttf", name)
    if not path.is_file():
        raise BenchError(f"font {name} is not in {path.parent}; the matplotlib of the locked environment ships it: "
                         "run `uv sync --locked`")
    return path


@cache
def _font(name: str, size: int) -> FreeTypeFont | BitmapFont:
    from PIL import ImageFont

    if name == PILLOW_FONT:
        return ImageFont.load_default(size=size)
    return ImageFont.truetype(str(font_path(name)), size, layout_engine=ImageFont.Layout.BASIC)


@cache
def _height_per_point(name: str) -> float:
    """Ink height of the digits (their union's bounding box) per point of font size, measured at 100 pt."""
    font = _font(name, 100)
    boxes = np.array([font.getbbox(str(d), anchor="mm") for d in range(NUM_CLASSES)])
    return float(boxes[:, 3].max() - boxes[:, 1].min()) / 100


@cache
def handwritten_bitmaps(split: Literal["train", "test"]) -> tuple[np.ndarray, np.ndarray]:
    """The 8x8 scikit-learn digits of the ``digits`` dataset's ``split`` (uint8 N x 8 x 8, labels)."""
    from bench.data.digits import prepare_digits

    data = prepare_digits(Path())
    x, y = (data.train_x, data.train_y) if split == "train" else (data.test_x, data.test_y)
    return x[:, 0], y


# ----------------------------------------------------------------------------------------------
# Draws


def layout(num_images: int, split: str, seed: int = SEED) -> tuple[np.ndarray, np.ndarray]:
    """Labels and domains of a split's images, in blocks of ``domains x classes``: each block holds every
    (domain, class) cell once, in the order of the stream ``(seed, "domaindigits", split, "order", block)``.
    So every cell is equally often in the split, and a smaller split is a prefix of a larger one."""
    cells = len(DOMAINS) * NUM_CLASSES
    if num_images % cells:
        raise BenchError(f"domaindigits: {num_images} images do not split evenly into {len(DOMAINS)} domains x "
                         f"{NUM_CLASSES} classes; use a multiple of {cells}")
    cell = np.concatenate([numpy_stream(seed, "domaindigits", split, "order", block).permutation(cells)
                           for block in range(num_images // cells)])
    return (cell % NUM_CLASSES).astype(np.int64), (cell // NUM_CLASSES).astype(np.int64)


def _colours(domain: Domain, rng: np.random.Generator) -> tuple[RGB, RGB]:
    """The image's ink and paper colours, the ink darker than the paper in every channel: palette entries
    jittered (the ink at least ``MIN_CHANNEL_GAP`` below the paper), or (``ink=None``) a random paper colour
    (each channel U(130, 255)) and a random darker shade of it as ink (each channel scaled by U(0.05, 0.5))."""
    if domain.ink is None:
        paper = rng.uniform(130, 255, 3)
        ink = paper * rng.uniform(0.05, 0.5, 3)
    else:
        ink = np.array(domain.ink[rng.integers(len(domain.ink))], float) + rng.normal(0, domain.jitter, 3)
        paper = np.array(domain.paper[rng.integers(len(domain.paper))], float) + rng.normal(0, domain.jitter, 3)
        paper = np.clip(paper, MIN_CHANNEL_GAP, 255)
        ink = np.minimum(ink, paper - MIN_CHANNEL_GAP)  # the jitter never lifts the ink to the paper

    def rgb(c: np.ndarray) -> RGB:
        r, g, b = (int(v) for v in np.clip(np.rint(c), 0, 255))
        return r, g, b

    return rgb(ink), rgb(paper)


def draw_image(label: int, domain_id: int, split: str, index: int, seed: int = SEED) -> Recipe:
    """The draws of image ``index`` of ``split`` (its own stream), given its label and domain."""
    domain = DOMAINS[domain_id]
    rng = numpy_stream(seed, "domaindigits", split, index)
    glyph = domain.glyphs[rng.integers(len(domain.glyphs))]
    bitmap = -1
    if glyph == HANDWRITTEN:
        _, labels = handwritten_bitmaps(split)
        bitmap = int(rng.choice(np.flatnonzero(labels == label)))
    has_neighbours = rng.random() < domain.neighbours
    left, right = (int(v) for v in rng.integers(0, NUM_CLASSES, 2))
    ink, paper = _colours(domain, rng)
    outline = None
    if domain.outline:
        r, g, b = domain.outline[rng.integers(len(domain.outline))]
        outline = (r, g, b)
    height = float(rng.uniform(*domain.height) * CANVAS)
    stroke = int(rng.integers(domain.stroke[0], domain.stroke[1] + 1))
    angle = float(rng.uniform(-domain.rotation, domain.rotation))
    shear = float(rng.uniform(-domain.shear, domain.shear))
    dx, dy = (float(v) for v in rng.uniform(-domain.shift, domain.shift, 2) * CANVAS)
    return Recipe(label=label, domain=domain_id, glyph=glyph, bitmap=bitmap, left=left if has_neighbours else -1,
                  right=right if has_neighbours else -1, height=height, stroke=stroke, angle=angle, shear=shear,
                  dx=dx, dy=dy, blur=float(rng.uniform(*domain.blur)), ink=ink, paper=paper, outline=outline)


# ----------------------------------------------------------------------------------------------
# Pixels


def _glyph_masks(draw: Recipe, split: str, rng: np.random.Generator) -> tuple[PILImage, PILImage]:
    """The digit (and its neighbours) white on black at the canvas centre, before the affine map: the
    fill, and the fill grown by the outline (the same image where the domain has no outline); greyscale."""
    from PIL import Image, ImageDraw, ImageFilter

    centre = CANVAS / 2
    if draw.glyph == HANDWRITTEN:
        bitmaps, labels = handwritten_bitmaps(split)
        size = max(8, int(round(draw.height)))
        wide = Image.new("L", (CANVAS * 2, CANVAS))
        spacing = int(round(size * 0.75))
        for digit, offset in ((draw.label, 0), (draw.left, -spacing), (draw.right, spacing)):
            if digit < 0:
                continue
            index = draw.bitmap if offset == 0 else int(rng.choice(np.flatnonzero(labels == digit)))
            glyph = Image.fromarray(bitmaps[index]).resize((size, size), Image.Resampling.BICUBIC)
            glyph = glyph.point(lambda v: 0 if v < 70 else min(255, (v - 70) * 2))
            wide.paste(glyph, (int(CANVAS + offset - size / 2), int(centre - size / 2)), glyph)
        fill = wide.crop((CANVAS // 2, 0, CANVAS // 2 + CANVAS, CANVAS))
        if draw.stroke:
            fill = fill.filter(ImageFilter.MaxFilter(2 * draw.stroke + 1))
        outer = fill.filter(ImageFilter.MaxFilter(5)) if draw.outline else fill
        return fill, outer
    font = _font(draw.glyph, max(6, int(round(draw.height / _height_per_point(draw.glyph)))))
    pitch = font.getlength(str(draw.label)) + draw.stroke
    masks = []
    for extra in ((0, 2) if draw.outline else (0,)):
        image = Image.new("L", (CANVAS, CANVAS))
        pen = ImageDraw.Draw(image)
        for digit, x in ((draw.label, centre), (draw.left, centre - pitch), (draw.right, centre + pitch)):
            if digit >= 0:
                pen.text((x, centre), str(digit), font=font, fill=255, anchor="mm",
                         stroke_width=draw.stroke + extra, stroke_fill=255)
        masks.append(image)
    return masks[0], masks[-1]


def _affine(image: PILImage, draw: Recipe) -> PILImage:
    """Rotate by ``angle``, shear by ``shear`` about the canvas centre, then shift by (dx, dy)."""
    from PIL import Image

    c = CANVAS / 2
    theta = math.radians(draw.angle)
    forward = np.array([[math.cos(theta), -math.sin(theta)], [math.sin(theta), math.cos(theta)]]) @ \
        np.array([[1.0, draw.shear], [0.0, 1.0]])
    inverse = np.linalg.inv(forward)
    centre = np.array([c, c])
    offset = centre - inverse @ (centre + np.array([draw.dx, draw.dy]))
    coefficients = (inverse[0, 0], inverse[0, 1], offset[0], inverse[1, 0], inverse[1, 1], offset[1])
    return image.transform((CANVAS, CANVAS), Image.Transform.AFFINE, coefficients, Image.Resampling.BILINEAR)


def _smooth_field(rng: np.random.Generator, cells: int) -> np.ndarray:
    """A smooth random field in [-1, 1] on the canvas: ``cells`` x ``cells`` uniform values, bicubic."""
    from PIL import Image

    coarse = rng.uniform(0, 255, (cells, cells)).astype(np.uint8)
    field = np.asarray(Image.fromarray(coarse).resize((CANVAS, CANVAS), Image.Resampling.BICUBIC), float)
    return field / 127.5 - 1.0


def background(domain: Domain, paper: RGB, rng: np.random.Generator) -> np.ndarray:
    """The domain's paper: its colour plus a gradient and its texture (float H x W x 3, 0..255 scale)."""
    yy, xx = np.mgrid[0:CANVAS, 0:CANVAS] / (CANVAS - 1) - 0.5
    angle = rng.uniform(0, 2 * math.pi)
    shade = rng.uniform(0, 30) * (math.cos(angle) * xx + math.sin(angle) * yy)
    s = domain.texture_strength
    if domain.texture == "flat":
        texture = s / 3 * _smooth_field(rng, 3)
    elif domain.texture == "clouds":
        texture = s * _smooth_field(rng, int(rng.integers(4, 9)))
    elif domain.texture == "speckle":
        texture = s * (rng.random((CANVAS, CANVAS)) ** 4) + s / 3 * _smooth_field(rng, 6)
    elif domain.texture == "grid":
        period, phases = int(rng.integers(9, 15)), rng.integers(0, 15, 2)
        lines = ((xx * (CANVAS - 1) + phases[0]) % period < 1.5) | ((yy * (CANVAS - 1) + phases[1]) % period < 1.5)
        texture = -s * lines
    elif domain.texture == "ruled":
        period, phase = int(rng.integers(10, 16)), int(rng.integers(0, 16))
        texture = -s * (((yy * (CANVAS - 1) + phase) % period) < 1.2)
        margin = int(rng.integers(4, 14))
        texture = np.repeat(texture[..., None], 3, axis=2)
        texture[:, margin:margin + 1] += np.array([s, -s, -s])  # a red margin line
        return np.asarray(paper, float) + shade[..., None] + texture
    else:  # halftone: dots on a regular grid, their size following a smooth field
        period = int(rng.integers(4, 7))
        radius = (0.25 + 0.2 * _smooth_field(rng, 4)) * period
        dx = (xx * (CANVAS - 1)) % period - period / 2
        dy = (yy * (CANVAS - 1)) % period - period / 2
        texture = -s * (np.hypot(dx, dy) < radius)
    return np.asarray(paper, float) + (shade + texture)[..., None]


def render_canvas(draw: Recipe, split: str, index: int, seed: int = SEED) -> np.ndarray:
    """Image ``index`` of ``split`` from its recipe at the canvas size, RGB uint8 H x W x 3 (before
    reduction and pixel noise); its texture and neighbours from the stream ``(..., "pixels", index)``."""
    from PIL import Image, ImageFilter

    domain = DOMAINS[draw.domain]
    rng = numpy_stream(seed, "domaindigits", split, "pixels", index)
    fill, outer = (np.asarray(_affine(m, draw), float) / 255 for m in _glyph_masks(draw, split, rng))
    canvas = background(domain, draw.paper, rng)
    ink = np.asarray(draw.ink, float)
    if draw.outline is not None:
        canvas = canvas * (1 - outer[..., None]) + np.asarray(draw.outline, float) * outer[..., None]
    if domain.shadow:
        ghost = np.zeros_like(fill)
        ghost[SHADOW_OFFSET:, SHADOW_OFFSET:] = domain.shadow * fill[:-SHADOW_OFFSET, :-SHADOW_OFFSET]
        canvas = canvas * (1 - ghost[..., None]) + ink * ghost[..., None]
    canvas = canvas * (1 - fill[..., None]) + ink * fill[..., None]
    image = Image.fromarray(np.uint8(np.clip(np.rint(canvas), 0, 255)), "RGB")
    return np.asarray(image.filter(ImageFilter.GaussianBlur(draw.blur)))


def to_output(canvas: np.ndarray, shape: tuple[int, int, int], noise: float,
              rng: np.random.Generator) -> np.ndarray:
    """Reduce an RGB canvas to ``shape`` (C x H x W; C = 1: grey by ITU-R 601 luma), add N(0, noise) per
    pixel, round to uint8."""
    from PIL import Image

    channels, height, width = shape
    image = Image.fromarray(canvas, "RGB").resize((width, height), Image.Resampling.BOX)
    if channels == 1:
        image = image.convert("L")
    pixels = np.asarray(image, float).reshape(height, width, channels)
    pixels = pixels + rng.normal(0, noise, pixels.shape)
    return np.clip(np.rint(pixels), 0, 255).astype(np.uint8).transpose(2, 0, 1)


def render_split(split: Literal["train", "test"], num_images: int, shape: tuple[int, int, int],
                 seed: int = SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Images (uint8 N x C x H x W), labels and domain ids of one split."""
    labels, domains = layout(num_images, split, seed)
    images = np.empty((num_images, *shape), np.uint8)
    for i, (label, domain_id) in enumerate(zip(labels.tolist(), domains.tolist())):
        draw = draw_image(label, domain_id, split, i, seed)
        canvas = render_canvas(draw, split, i, seed)
        images[i] = to_output(canvas, shape, DOMAINS[domain_id].noise,
                              numpy_stream(seed, "domaindigits", split, "noise", i))
    return images, labels, domains


# ----------------------------------------------------------------------------------------------
# The prepared dataset


def domain_table() -> list[dict[str, object]]:
    """The manifest's domain table: each domain's id, name and style."""
    return [{"id": k, **{key: list(v) if isinstance(v, tuple) else v for key, v in asdict(d).items()}}
            for k, d in enumerate(DOMAINS)]


def _versions() -> dict[str, str]:
    import matplotlib
    import PIL
    import sklearn
    from PIL import features

    return {"pillow": PIL.__version__, "freetype": str(features.version("freetype2")),
            "matplotlib": matplotlib.__version__, "scikit-learn": sklearn.__version__, "numpy": np.__version__}


def build(name: str, shape: tuple[int, int, int], num_train: int = NUM_TRAIN, num_test: int = NUM_TEST,
          seed: int = SEED) -> PreparedDataset:
    """The dataset ``name``: ``num_train`` / ``num_test`` images of ``shape`` (multiples of 100)."""
    train_x, train_y, train_d = render_split("train", num_train, shape, seed)
    test_x, test_y, test_d = render_split("test", num_test, shape, seed)
    mean, std = channel_stats(train_x)
    fonts = sorted({g for d in DOMAINS for g in d.glyphs} - {HANDWRITTEN, PILLOW_FONT})
    source = {"origin": f"font digits and scikit-learn's handwritten digits rendered in {len(DOMAINS)} visual "
                        "domains (bench/data/domaindigits.py)",
              "version": VERSION, "seed": seed, "canvas": CANVAS, "domains": domain_table(),
              "fonts": {f: sha256_file(font_path(f)) for f in fonts}, "packages": _versions()}
    return PreparedDataset(name=name, train_x=train_x, train_y=train_y, test_x=test_x, test_y=test_y,
                           num_classes=NUM_CLASSES, mean=mean, std=std, train_domain=train_d, test_domain=test_d,
                           source=source)


def register_domain_digits(name: str, shape: tuple[int, int, int], num_train: int = NUM_TRAIN,
                           num_test: int = NUM_TEST) -> DatasetSpec:
    """Register a variant: ``shape`` (1 x H x W grey or 3 x H x W colour) and the split sizes (multiples of
    100; a variant's splits are prefixes of a larger variant's at the same shape)."""
    colour = "grey" if shape[0] == 1 else "colour"
    return register_dataset(DatasetSpec(
        name=name, num_classes=NUM_CLASSES, image_shape=shape, num_train=num_train, num_test=num_test,
        prepare=lambda data_dir: build(name, shape, num_train, num_test), embedded=True,
        description=f"digits in {len(DOMAINS)} visual domains, {'x'.join(map(str, shape))} {colour}, rendered "
                    "offline (not a paper dataset)"))


DOMAINDIGITS28 = register_domain_digits("domaindigits28", (1, 28, 28))
DOMAINDIGITS32 = register_domain_digits("domaindigits32", (3, 32, 32))
DOMAINDIGITS8 = register_domain_digits("domaindigits8", (1, 8, 8))  # for the proxies' 8x8 networks
