"""Take the README's screenshot of a run's report with headless Chromium.

    python examples/screenshots.py RUN [--out docs/images/report.png]

RUN is a run directory (for the README: the kuhn-selfplay preset with
``train.iterations=40 rollout.games_per_iter=32 train.eval_every=5
train.eval_episodes=32``). Its report is written first (``coplay report``), then the
first evaluation and rollout curves and a sample game are captured as one PNG. Needs Playwright
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


COMPOSE = """(charts) => {
  // Keep the title, the first evaluation and rollout curves and one sample game.
  const pick = (sel) => document.querySelector(sel);
  const grids = ["eval", "rollout"].map((s) => pick(`.grid[data-section="${s}"]`));
  for (const grid of grids) [...grid.children].slice(charts).forEach((c) => c.remove());
  const parts = [pick("header h1"), ...grids, pick("details.iteration .game")];
  document.body.replaceChildren(...parts.filter(Boolean));
}"""


def capture(page_file: Path, out: Path, *, charts: int = 3) -> None:
    """The page reduced to ``charts`` evaluation and rollout curves and one game."""
    chromium = shutil.which("chromium")
    if chromium is None:
        raise SystemExit("no chromium on PATH (Debian: apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": WIDTH, "height": 900})
        page.goto(page_file.resolve().as_uri())
        page.evaluate(COMPOSE, charts)
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
