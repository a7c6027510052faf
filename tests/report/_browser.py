"""Open a report folder in headless Chromium and measure what a reader would see.

Used by ``test_browser.py``, and runnable on any report folder::

    python -m tests.report._browser report/        # prints the measurements, exit 1 on a fault

Each page (``index.html`` and every ``claims/*.html``) is loaded at 1400, 1280 and 1000 CSS
px wide and measured: elements wider than their container, the page's own sideways scroll,
its height, console errors, images that did not load, whether each verdict badge and
why-line lies inside the viewport, words a table cell splits mid-word (a word without a
hyphen, underscore or slash to break at), and the column headers of its tables.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PageStats", "browser_path", "measure_report"]

WIDTHS = (1400, 1280, 1000)

#: The page measures itself: every element against its parent's box, and its own content.
_MEASURE = r"""() => {
  const over = [];
  for (const el of document.querySelectorAll('body *')) {
    const parent = el.parentElement;
    const r = el.getBoundingClientRect();
    if (!parent || (r.width === 0 && r.height === 0)) continue;
    const p = parent.getBoundingClientRect();
    const spills = el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1;
    if (r.right > p.right + 1 || r.left < p.left - 1 || spills) {
      over.push(el.tagName.toLowerCase() + (el.className ? '.' + el.className : '') +
                ' ' + (el.textContent || '').trim().slice(0, 40));
    }
  }
  const visible = (el) => {
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && r.left >= 0 && r.right <= window.innerWidth + 1;
  };
  // A word with no break point (hyphen, underscore, slash) that the browser had to split
  // across lines: the cell is too narrow for it.
  const broken = [];
  for (const cell of document.querySelectorAll('td, th')) {
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.textContent.matchAll(/[^\s\-_\/]+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const lines = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
        if (lines.size > 1) broken.push(m[0]);
      }
    }
  }
  const verdicts = [...document.querySelectorAll('.verdict')];
  const whys = [...document.querySelectorAll('.why')];
  const images = [...document.images].map(i => ({src: i.src.slice(-60),
                                                 ok: i.complete && i.naturalWidth > 0}));
  return {
    overflowing: over,
    broken_words: broken,
    page_scroll: document.documentElement.scrollWidth > window.innerWidth + 1,
    height: document.documentElement.scrollHeight,
    verdicts: verdicts.length, verdicts_hidden: verdicts.filter(v => !visible(v)).length,
    whys: whys.length, whys_hidden: whys.filter(w => !visible(w)).length,
    images: images,
    headers: [...document.querySelectorAll('th')].map(th => th.textContent.trim()),
  };
}"""


@dataclass
class PageStats:
    """What one page looked like at one width."""

    page: str
    width: int
    height: int
    overflowing: list[str]
    page_scroll: bool
    verdicts: int
    verdicts_hidden: int
    whys: int
    whys_hidden: int
    broken_images: list[str]
    images: int
    console_errors: list[str] = field(default_factory=list)
    headers: list[str] = field(default_factory=list)
    broken_words: list[str] = field(default_factory=list)

    def faults(self) -> list[str]:
        """Every problem on the page, in words (empty when it reads well)."""
        out = [f"{len(self.overflowing)} overflowing: {self.overflowing[:5]}"] * bool(
            self.overflowing
        )
        if self.page_scroll:
            out.append("the page scrolls sideways")
        if self.broken_words:
            out.append(f"words split mid-word in a cell: {self.broken_words[:5]}")
        if self.verdicts_hidden or self.whys_hidden:
            out.append(f"{self.verdicts_hidden} verdicts, {self.whys_hidden} why-lines off-screen")
        if self.broken_images:
            out.append(f"images that did not load: {self.broken_images}")
        if self.console_errors:
            out.append(f"console errors: {self.console_errors}")
        return [f"{self.page} at {self.width} px: {fault}" for fault in out]


def browser_path() -> str | None:
    """The system Chromium, or None (``NORMLAB_CHROMIUM`` overrides the search)."""
    for candidate in (
        os.environ.get("NORMLAB_CHROMIUM"),
        "/usr/bin/chromium",
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
        shutil.which("google-chrome"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def measure_report(folder: Path | str, executable: str | None = None) -> list[PageStats]:
    """Load every page of the report in ``folder`` at each of :data:`WIDTHS` and measure it."""
    from playwright.sync_api import sync_playwright

    folder = Path(folder).resolve()
    pages = [folder / "index.html", *sorted((folder / "claims").glob("*.html"))]
    stats = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=executable or browser_path(), args=["--no-sandbox"], headless=True
        )
        try:
            for width in WIDTHS:
                tab = browser.new_page(viewport={"width": width, "height": 900})
                errors: list[str] = []
                tab.on(
                    "console", lambda m, e=errors: e.append(m.text) if m.type == "error" else None
                )
                tab.on("pageerror", lambda exc, e=errors: e.append(str(exc)))
                for path in pages:
                    errors.clear()
                    tab.goto(path.as_uri(), wait_until="load")
                    got: dict[str, Any] = tab.evaluate(_MEASURE)
                    stats.append(
                        PageStats(
                            page=str(path.relative_to(folder)),
                            width=width,
                            height=int(got["height"]),
                            overflowing=got["overflowing"],
                            page_scroll=bool(got["page_scroll"]),
                            verdicts=got["verdicts"],
                            verdicts_hidden=got["verdicts_hidden"],
                            whys=got["whys"],
                            whys_hidden=got["whys_hidden"],
                            broken_images=[i["src"] for i in got["images"] if not i["ok"]],
                            images=len(got["images"]),
                            console_errors=list(errors),
                            headers=list(got["headers"]),
                            broken_words=list(got["broken_words"]),
                        )
                    )
                tab.close()
        finally:
            browser.close()
    return stats


def main(argv: list[str]) -> int:
    """Print each page's measurements as JSON lines; exit 1 when any page has a fault."""
    stats = measure_report(argv[0] if argv else "report")
    for s in stats:
        print(json.dumps({**s.__dict__, "overflowing": len(s.overflowing), "headers": None}))
    faults = [f for s in stats for f in s.faults()]
    index = [s.height for s in stats if s.page == "index.html"]
    print(f"{len(stats)} page views; index height {index} px; {len(faults)} faults")
    for fault in faults:
        print(fault)
    return 1 if faults or max(index) >= 10_000 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
