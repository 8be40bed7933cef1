"""Take the README's screenshot of a run's report with headless Chromium.

    python examples/screenshots.py RUN [--out docs/images/report.png]

RUN is a run directory; the README's is ``coplay train --out runs/kuhn-selfplay
train.iterations=40 rollout.games_per_iter=32 train.eval_every=5 train.eval_episodes=32``.
Its report is written first (``coplay report``), then the
curves of ``KEYS`` and a sample game are captured as one PNG. Needs Playwright
and a Chromium on PATH (Debian's ``chromium``).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from playwright.sync_api import sync_playwright

from coplay.train.report import write_report

WIDTH = 1360
"""Three charts per row."""


KEYS = (
    "eval/exploitability",
    "eval/learner/nash/exact_loss",
    "rollout/return",
    "loss/entropy",
    "loss/kl",
    "perf/decisions_per_s",
)
"""The charts the screenshot keeps, in this order."""

COMPOSE = """(keys) => {
  // Keep the title, the charts named in keys and one sample game.
  const grid = document.querySelector(".grid");
  const charts = keys.map((k) => document.querySelector(`.chart[data-key="${k}"]`));
  grid.replaceChildren(...charts.filter(Boolean));
  const game = document.querySelector("details.iteration .game");
  document.body.replaceChildren(document.querySelector("header h1"), grid, game);
}"""


def capture(page_file: Path, out: Path) -> None:
    """The page reduced to the charts of ``KEYS`` and one game."""
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("no chromium on PATH (Debian: apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": WIDTH, "height": 900})
        page.goto(page_file.resolve().as_uri())
        page.evaluate(COMPOSE, list(KEYS))
        page.screenshot(path=str(out), full_page=True)
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/images/report.png"))
    args = parser.parse_args()
    page_file = write_report([args.run], args.run / "report.html")
    capture(page_file, args.out)
    print(f"written: {args.out} ({args.out.stat().st_size / 1024:.0f} kB)")


if __name__ == "__main__":
    main()
