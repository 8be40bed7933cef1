"""The examples of README.md and docs/*.md that are marked runnable run as written.

A fenced block is runnable when the line before its opening fence is an HTML comment
(invisible on GitHub):

- ``<!-- runnable -->``: a ``bash`` block runs each ``coplay ...`` command (comments
  dropped, ``\\`` continuations joined) through ``coplay.cli.main`` in-process; a
  ``python`` block is executed.
- ``<!-- runnable: FILE -->``: the block is written to ``FILE`` for later blocks.

The blocks of one document run in order in one temporary directory (so a later
command finds an earlier one's run directory), with the repository root importable
(``examples.bidding:make``). Budgets stay the documents' own except that every run
config gets ``BUDGET`` appended (later overrides win), and eval, tournament, psro and
check-env get ``OPTION_BUDGET``: the test checks that an example runs, not how well
it trains.

The README's CLI block names every command, each with options it takes.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

import coplay
from coplay.cli import COMMANDS, main
from coplay.train import settings as run_config

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BUDGET = [
    "train.iterations=1",
    "train.eval_every=1",
    "train.eval_episodes=8",
    "rollout.games_per_iter=8",
    "model.tiny.hidden_size=32",
    "model.tiny.intermediate_size=64",
    "train.exact=false",
    "train.exact_matches=false",
]
OPTION_BUDGET = {
    "eval": ["--episodes", "8", "--samples", "2"],
    "demos": ["--games", "20"],
    "sft": ["sft.epochs=1", "model.tiny.hidden_size=32", "model.tiny.intermediate_size=64"],
    "tournament": ["--episodes", "4"],
    "psro": ["--iterations", "1"],
    "check-env": ["--episodes", "3"],
}
MARKED = re.compile(r"^<!-- runnable(?::\s*(?P<file>\S+))?\s*-->\n```(?P<lang>\w*)[^\n]*\n", re.M)


@dataclass(frozen=True)
class Block:
    doc: str
    line: int
    lang: str
    file: str | None
    """Where a data block goes; None for a block that runs."""
    text: str


def runnable_blocks(path: Path) -> list[Block]:
    """The marked blocks of a Markdown file, in order."""
    text = path.read_text()
    blocks = []
    for m in MARKED.finditer(text):
        end = text.index("\n```", m.end() - 1)
        line = text[: m.start()].count("\n") + 2
        body = text[m.end() : end + 1]
        blocks.append(Block(path.name, line, m["lang"], m["file"], body))
    return blocks


def commands(block: Block) -> list[list[str]]:
    """The coplay commands of a shell block, as argument lists without ``coplay``."""
    joined = block.text.replace("\\\n", " ")
    out = []
    for raw in joined.splitlines():
        words = shlex.split(raw, comments=True)
        if not words:
            continue
        assert words[0] == "coplay", f"{block.doc}:{block.line}: runs only coplay, got {raw!r}"
        out.append(words[1:])
    return out


def _budgeted(build):
    def build_config(*, preset=None, file=None, overrides=()):
        return build(preset=preset, file=file, overrides=[*overrides, *BUDGET])

    return build_config


def run_block(block: Block, capsys) -> None:
    where = f"{block.doc}:{block.line}"
    if block.file:
        Path(block.file).write_text(block.text)
    elif block.lang in ("bash", "sh", ""):
        for argv in commands(block):
            status = main([*argv, *OPTION_BUDGET.get(argv[0], [])])
            err = capsys.readouterr().err.strip().splitlines()
            assert status == 0, f"{where}: coplay {shlex.join(argv)} -> {status}: {err[-1:]}"
    elif block.lang == "python":
        exec(compile(block.text, where, "exec"), {"__name__": "__docs__"})  # noqa: S102
    else:
        raise AssertionError(f"{where}: cannot run a {block.lang!r} block")


def test_the_marker_finds_blocks_files_and_commands(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text(
        "text\n<!-- runnable: r.yaml -->\n```yaml\na: 1\n```\n\n```bash\ncoplay no\n```\n"
        "<!-- runnable -->\n```bash\ncoplay train --out r \\\n    x=1   # why\n"
        "# a comment\ncoplay games\n```\n"
    )
    data, shell = runnable_blocks(doc)
    assert (data.file, data.lang, data.text, data.line) == ("r.yaml", "yaml", "a: 1\n", 3)
    assert commands(shell) == [["train", "--out", "r", "x=1"], ["games"]]


@pytest.mark.parametrize("doc", [d for d in DOCS if runnable_blocks(d)], ids=lambda d: d.name)
def test_marked_examples_run_as_written(doc, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(ROOT))
    budgeted = _budgeted(run_config.build_config)
    monkeypatch.setattr(run_config, "build_config", budgeted)
    monkeypatch.setattr(coplay, "build_config", budgeted)
    for block in runnable_blocks(doc):
        run_block(block, capsys)


def test_the_readme_and_the_envs_and_roster_docs_mark_runnable_examples():
    marked = {d.name for d in DOCS if runnable_blocks(d)}
    assert {"README.md", "envs.md", "roster.md"} <= marked


def readme_cli() -> dict[str, set[str]]:
    """The options each command of the README's CLI block shows, by command (a line
    that starts with spaces goes on the one before; comments dropped)."""
    block = (ROOT / "README.md").read_text().split("\n## CLI\n", 1)[1]
    block = block.split("```bash\n", 1)[1].split("\n```", 1)[0]
    shown: dict[str, set[str]] = {}
    name = ""
    for line in block.splitlines():
        words = line.split("#", 1)[0]
        if not line.startswith(" "):
            name = words.split()[1]
        shown.setdefault(name, set()).update(re.findall(r"(?<![\w-])--[a-z][a-z-]*", words))
    return shown


def test_the_readme_cli_block_lists_every_command_with_options_it_takes(capsys):
    shown = readme_cli()
    missing, unknown = sorted(set(COMMANDS) - set(shown)), sorted(set(shown) - set(COMMANDS))
    assert not missing and not unknown, f"README's CLI block: missing {missing}, unknown {unknown}"
    for name, options in shown.items():
        with pytest.raises(SystemExit):
            main([name, "--help"])
        usage = capsys.readouterr().out
        taken = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", usage))
        assert options <= taken, f"coplay {name} takes no {sorted(options - taken)}"
