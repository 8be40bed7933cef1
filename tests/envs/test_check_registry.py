"""What running a check makes of what it meets: findings past the cap are counted in a
note, and a game that cannot be played at random has its checks skipped, not failed."""

from coplay.envs.check import check_env
from tests.envs.test_check import Duel, NotZeroSum


def test_findings_are_capped_with_a_note():
    result = check_env(NotZeroSum, episodes=40, checks=["returns"]).results[0]
    assert len(result.findings) == 5 and "more findings not shown" in result.note


def test_free_text_games_are_played_with_sample_texts_or_skipped():
    class FreeText(Duel):
        def legal(self, player):
            return None if player in self.players_to_act() else ()

        def parse_action(self, player, text):
            return "[Raise]" if player == 0 else "[Call]"

    assert check_env(FreeText, episodes=3).passed

    class Unplayable(FreeText):
        def parse_action(self, player, text):
            return None

    report = check_env(Unplayable, episodes=3)
    assert report.passed and {r.status for r in report.results} == {"skip"}
