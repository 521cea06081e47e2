"""KaTeX for the website, fetched at build time from the npm registry and served by the site
itself: the pages typeset their math with no CDN, so they work offline (and the browser tests
run offline). The package is cached in the build folder, so a second build fetches nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from grader.usage import UsageError

KATEX_VERSION = "0.16.47"  # pinned: the site is tested with this one


def katex_dist(cache: Path) -> Path:
    """The `dist/` folder of the katex npm package, from `cache` or fetched into it with
    `npm pack` (which downloads the published tarball without installing anything)."""
    dist = cache / f"katex-{KATEX_VERSION}" / "dist"
    if (dist / "katex.min.js").is_file():
        return dist
    npm = shutil.which("npm")
    if npm is None:
        raise UsageError("building the site needs npm, to fetch KaTeX from the npm registry once")
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as scratch:
        command = [npm, "pack", f"katex@{KATEX_VERSION}", "--pack-destination", scratch]
        completed = subprocess.run(command, capture_output=True, text=True, timeout=300)
        tarballs = list(Path(scratch).glob("katex-*.tgz"))
        if completed.returncode != 0 or not tarballs:
            raise UsageError(f"npm pack katex@{KATEX_VERSION} failed: {completed.stderr.strip()[-500:]}")
        with tarfile.open(tarballs[0]) as tar:
            tar.extractall(scratch, filter="data")  # "data": no links or paths out of scratch
        dist.parent.mkdir(parents=True, exist_ok=True)
        # Renamed into place whole and last, so an interrupted fetch leaves no half a cache; a
        # build that fetched at the same time and got there first is as good (the rename fails).
        try:
            os.rename(Path(scratch) / "package" / "dist", dist)
        except OSError:
            if not (dist / "katex.min.js").is_file():
                raise
    return dist


def copy_katex(cache: Path, target: Path) -> None:
    """What the pages load: katex.min.js, katex.min.css and the fonts it names in woff2 (every
    browser the site supports picks woff2 first, so the .woff and .ttf copies are left out)."""
    dist = katex_dist(cache)
    (target / "fonts").mkdir(parents=True, exist_ok=True)
    for name in ("katex.min.js", "katex.min.css"):
        shutil.copy2(dist / name, target / name)
    for font in (dist / "fonts").glob("*.woff2"):
        shutil.copy2(font, target / "fonts" / font.name)
