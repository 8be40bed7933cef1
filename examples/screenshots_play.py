"""Write docs/images/play.png: the play page of ``coplay play RUN --web`` mid-game.

    python examples/screenshots_play.py [RUN] [--out docs/images/play.png]

RUN is a Kuhn run directory (default: a short run trained here, in a temporary
folder). A scripted person plays one game, deals the next and stops where the agent
has moved (its distribution shown) and the person is to click. Needs Playwright and
Debian's ``chromium``.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import threading
from functools import partial
from pathlib import Path

from coplay.envs.registry import make_env
from coplay.models.checkpoints import find_policy
from coplay.play.session import Session
from coplay.play.web import make_server

TRAIN = [
    "train.iterations=20",
    "train.eval_every=20",
    "train.eval_opponents=[]",
    "train.exact=false",
    "train.exact_matches=false",
]


def tiny_run(folder: Path) -> Path:
    from coplay.train.settings import build_config
    from coplay.train.trainer import train

    out = folder / "kuhn"
    train(build_config(preset="kuhn-selfplay", overrides=TRAIN), out)
    return out


def screenshot(run: Path, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    agent = find_policy(run).load(seed=0)
    players = {"you": None, "agent": agent}
    session = Session(
        partial(make_env, "kuhn_poker"), players, ["you", "agent"], rotate=True, show_probs=True
    )
    server = make_server(session, port=0, transcripts=run / "transcripts.jsonl")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1120, "height": 430})
        page.goto(server.url)
        while page.is_hidden("#result"):  # game 1: bet, and call any bet
            page.click("#moves button[data-action='[Bet]']")
            page.wait_for_timeout(200)
        page.click("#next-game")  # game 2: the agent sits first and has moved
        page.wait_for_selector("#log .probs")
        out.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(out))
        browser.close()
    server.shutdown()
    print(f"written: {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", nargs="?", type=Path, help="a Kuhn run directory")
    parser.add_argument("--out", type=Path, default=Path("docs/images/play.png"))
    args = parser.parse_args()
    if args.run is not None:
        return screenshot(args.run, args.out)
    with tempfile.TemporaryDirectory() as folder:
        screenshot(tiny_run(Path(folder)), args.out)


if __name__ == "__main__":
    main()
