"""Which JPEG decoder should the `compressed_image` ingress codec use?

Two camera frames as vehicles record them (768x576 and 1920x1080), a smooth synthetic scene with
sensor grain, encoded once with Pillow at quality 90 (4:2:0, as image_transport's default), then
decoded by every decoder that imports here into the (H, W, 3) uint8 RGB array the camera graph
reads (a BGR decoder pays for its channel swap). Each time is the median of repeated decodes;
Pillow, already a dependency, is the anchor (ratio = Pillow time / decoder time). A decoder that
is not installed, or whose system library is missing (PyTurboJPEG needs libturbojpeg), is listed
as absent. Run standalone: `python bench/bench_jpeg.py` (a few seconds).
"""
from __future__ import annotations

import io
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without install

from timing import median_seconds  # noqa: E402 - bench/timing.py, beside this script

SIZES = ((768, 576), (1920, 1080))
REPEATS = 30


def make_frame(width: int, height: int) -> np.ndarray:
    """A seeded (H, W, 3) uint8 scene: sky and road gradients, a few boxes, Gaussian grain (sigma 3)."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    img = np.empty((height, width, 3), np.float32)
    sky = y < height * 0.45
    img[..., 0] = np.where(sky, 120 + 60 * y / height, 90 + 20 * np.sin(x / 37.0))
    img[..., 1] = np.where(sky, 160 + 50 * y / height, 90 + 20 * np.cos(y / 23.0))
    img[..., 2] = np.where(sky, 230 - 30 * y / height, 95 + 10 * np.sin((x + y) / 51.0))
    for _ in range(12):
        x0, y0 = rng.integers(0, width - width // 8), rng.integers(height // 3, height - height // 8)
        img[y0:y0 + height // 10, x0:x0 + width // 12] = rng.integers(20, 240, 3)
    img += rng.normal(0, 3, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def encode(frame: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(frame).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def decoders() -> dict[str, Callable[[bytes], np.ndarray] | str]:
    """name (with version) -> decode(bytes) -> RGB array, or a string saying why it is absent."""
    out: dict[str, Callable[[bytes], np.ndarray] | str] = {}
    from PIL import Image, __version__ as pil_version

    out[f"Pillow {pil_version}"] = lambda b: np.asarray(Image.open(io.BytesIO(b)).convert("RGB"))
    try:
        import simplejpeg

        out[f"simplejpeg {simplejpeg.__version__}"] = lambda b: simplejpeg.decode_jpeg(b, colorspace="RGB")
    except ImportError as e:
        out["simplejpeg"] = f"absent ({e})"
    try:
        import cv2

        def cv(b: bytes) -> np.ndarray:
            bgr = cv2.imdecode(np.frombuffer(b, np.uint8), cv2.IMREAD_COLOR)
            return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)

        out[f"opencv-python-headless {cv2.__version__}"] = cv
    except ImportError as e:
        out["opencv-python-headless"] = f"absent ({e})"
    try:
        from turbojpeg import TJPF_RGB, TurboJPEG

        tj = TurboJPEG()
        out["PyTurboJPEG"] = lambda b: tj.decode(b, pixel_format=TJPF_RGB)
    except Exception as e:  # ImportError, or RuntimeError when libturbojpeg is not on the system
        out["PyTurboJPEG"] = f"absent ({str(e).splitlines()[0]})"
    return out


def main() -> None:
    decs = decoders()
    frames = {f"{w}x{h}": make_frame(w, h) for w, h in SIZES}
    data = {k: encode(f) for k, f in frames.items()}
    cols = list(frames)
    print(f"JPEG decode to (H, W, 3) uint8 RGB, quality 90 4:2:0, median of {REPEATS} "
          f"({', '.join(f'{k}: {len(v) // 1024} KiB' for k, v in data.items())})")
    print(f"{'decoder':<32}" + "".join(f"{c + ' ms':>14}{'x Pillow':>10}" for c in cols))
    anchor: dict[str, float] = {}
    for name, fn in decs.items():
        if isinstance(fn, str):
            print(f"{name:<32}{fn}")
            continue
        row = f"{name:<32}"
        for c in cols:
            got = fn(data[c])
            assert got.shape == frames[c].shape and got.dtype == np.uint8, (name, got.shape, got.dtype)
            err = np.abs(got.astype(np.int16) - frames[c]).mean()
            assert err < 6, (name, err)   # the same picture, within JPEG's loss
            t = median_seconds(lambda: fn(data[c]), REPEATS, warmup=3)
            anchor.setdefault(c, t)
            row += f"{t * 1e3:>14.2f}{anchor[c] / t:>10.2f}"
        print(row)


if __name__ == "__main__":
    main()
