"""``coplay demos`` and ``coplay sft`` (their runs are tested in tests/sft)."""

from coplay.cli import main


def test_demos_force_keeps_the_old_file_when_the_player_or_game_is_bad(tmp_path, capsys):
    out = tmp_path / "d.jsonl"
    out.write_text("mine\n")
    for bad in (["--player", "bogus"], ["--player", "nash", "players=3"], ["--game", "nogame"]):
        argv = ["demos", "--game", "kuhn_poker", "--out", str(out), "--force", *bad]
        assert main(argv) == 2
        assert len(capsys.readouterr().err.splitlines()) == 1
        assert out.read_text() == "mine\n" and not list(tmp_path.glob("d.jsonl.old-*"))
