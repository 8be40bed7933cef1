"""One game in flight: rewards that sum to the returns, the invalid-action treatments,
messages as the game reads them, openings, truncation and the end."""

import pytest

from coplay.envs.registry import make_env
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.engine import play_episodes
from coplay.rollout.invalid import InvalidActionConfig
from coplay.types import Decision, GameKind, GameSpec, Observation
from tests.rollout.bots import FirstLegal, Scripted, SteeredFirst, kuhn


def test_turn_rewards_sum_to_returns_and_returns_match_env():
    r = RandomPolicy(seed=0)
    eps = play_episodes(kuhn, [[r, r]] * 50, list(range(50)))
    for e in eps:
        assert sum(e.returns) == pytest.approx(0.0)
        for traj in e.trajectories:
            assert sum(t.reward for t in traj.turns) == pytest.approx(traj.ret)


def test_valid_answer_needs_no_treatment():
    bot = Scripted(["I think [pass]"])
    ep = play_episodes(kuhn, [[bot, bot]], [0])[0]
    assert all(t.treatment is None and t.played_action == "[Pass]" for t in ep.turns)


def test_retry_allowance_records_rejected_answers():
    bot = Scripted(["nonsense", "[Bet]", "[Pass]"])
    cfg = InvalidActionConfig(retries=1, on_fail="forfeit")
    ep = play_episodes(kuhn, [[bot, bot]], [0], invalid=cfg)[0]
    first = ep.trajectories[0].turns[0]
    assert first.treatment == "retry"
    assert [d.text for d in first.invalid_attempts] == ["nonsense"]
    assert first.played_action == "[Bet]"
    assert ep.forfeited_by is None


def test_penalty_plays_a_random_legal_action_and_costs_reward():
    bot = Scripted(["???"])
    cfg = InvalidActionConfig(retries=0, on_fail="penalty", penalty=-0.5)
    ep = play_episodes(kuhn, [[bot, bot]], [0], invalid=cfg)[0]
    env_returns = [
        tr.ret + 0.5 * sum(t.treatment == "penalty" for t in tr.turns) for tr in ep.trajectories
    ]
    for traj in ep.trajectories:
        for t in traj.turns:
            assert t.treatment == "penalty"
            assert t.played_action in t.observation.legal_actions
            assert not t.decision.valid
        assert sum(t.reward for t in traj.turns) == pytest.approx(traj.ret)
    assert sum(env_returns) == pytest.approx(0.0)  # the game itself stays zero-sum
    n_pen = sum(t.treatment == "penalty" for t in ep.turns)
    assert sum(ep.returns) == pytest.approx(-0.5 * n_pen)


def test_penalty_moves_are_drawn_uniformly_from_the_legal_actions():
    bot = Scripted(["???"])
    cfg = InvalidActionConfig(retries=0, on_fail="penalty", penalty=-0.5)
    eps = play_episodes(kuhn, [[bot, bot]] * 400, list(range(400)), invalid=cfg)
    firsts = [e.turns[0] for e in eps]
    assert all(t.treatment == "penalty" for t in firsts)
    bets = sum(t.played_action == "[Bet]" for t in firsts)
    # Binomial(400, 1/2): sd 10, so 150..250 is five sd either side.
    assert 150 <= bets <= 250
    assert {t.played_action for t in firsts} == {"[Pass]", "[Bet]"}


def test_a_penalty_move_is_its_seats_stream_draw():
    # With streams, each penalty move is the seat's next draw (the scripted bot draws
    # nothing itself): replayed here from fresh streams of the same seeds.
    from coplay.rollout.streams import SeatStream

    bot = Scripted(["???"])
    cfg = InvalidActionConfig(retries=0, on_fail="penalty", penalty=-0.5)
    streams = [1000 + i for i in range(40)]
    eps = play_episodes(kuhn, [[bot, bot]] * 40, [0] * 40, invalid=cfg, streams=streams)
    played = []
    for ep, stream in zip(eps, streams, strict=True):
        for seat, traj in enumerate(ep.trajectories):
            own = SeatStream(stream, seat)
            for t in traj.turns:
                legal = t.observation.legal_actions
                assert t.treatment == "penalty"
                assert t.played_action == legal[own.below(len(legal))]
                played.append(t.played_action)
    assert set(played) == {"[Pass]", "[Bet]"}


def test_retries_then_penalty():
    bot = Scripted(["x", "y", "z"])
    cfg = InvalidActionConfig(retries=2, on_fail="penalty", penalty=-1.0)
    ep = play_episodes(kuhn, [[bot, bot]], [0], invalid=cfg)[0]
    first = ep.trajectories[0].turns[0]
    assert [d.text for d in first.invalid_attempts] == ["x", "y"]
    assert first.decision.text == "z" and first.treatment == "penalty"


def test_forfeit_ends_the_game_with_minimum_return():
    good, bad = FirstLegal(), Scripted(["no idea"], policy_id="bad")
    ep = play_episodes(kuhn, [[good, bad]], [0])[0]  # default: forfeit, no retries
    spec = kuhn().spec
    assert ep.forfeited_by == 1
    assert ep.returns == (-spec.min_return, spec.min_return)
    last = ep.trajectories[1].turns[-1]
    assert last.treatment == "forfeit" and last.played_action is None
    for traj in ep.trajectories:
        assert sum(t.reward for t in traj.turns) == pytest.approx(traj.ret)


def test_an_outcome_is_kept_where_the_game_gives_one_and_a_forfeit_ends_none():
    lake = lambda: make_env("frozen_lake", reward="dense")  # noqa: E731
    played = play_episodes(lake, [[FirstLegal()]], [0])[0]
    assert played.trajectories[0].outcome in (0.0, 1.0)  # the game gives one
    forfeited = play_episodes(lake, [[Scripted(["no idea"])]], [0])[0]
    assert forfeited.forfeited_by == 0 and forfeited.trajectories[0].outcome is None
    kuhn_game = play_episodes(kuhn, [[FirstLegal(), FirstLegal()]], [0])[0]
    assert [t.outcome for t in kuhn_game.trajectories] == [None, None]  # Kuhn gives none


def goofspiel():
    return make_env("openspiel:goofspiel")  # zero-sum, simultaneous moves


def test_both_players_forfeiting_one_round_are_both_charged():
    bad = Scripted(["no idea"], policy_id="bad")
    ep = play_episodes(goofspiel, [[bad, bad]], [0])[0]
    low = goofspiel().spec.min_return
    assert ep.forfeited_by == 0 and ep.returns == (low, low)
    for traj in ep.trajectories:
        assert [t.treatment for t in traj.turns] == ["forfeit"]
        assert traj.turns[0].reward == traj.ret == low


class Call:
    """One round of simultaneous moves: seat 0 calls heads or tails while seat 1 writes
    a free-text message (an empty one is not one); zero-sum, seat 0 wins on heads."""

    spec = GameSpec(
        name="call",
        num_players=2,
        kind=GameKind.ZERO_SUM,
        max_turns=1,
        perfect_information=False,
        min_return=-1.0,
        max_return=1.0,
    )

    def reset(self, seed):
        self.done = False
        self.heads = False

    def players_to_act(self):
        return [] if self.done else [0, 1]

    def observe(self, player):
        legal = ("heads", "tails") if player == 0 else None
        return Observation(game="call", player=player, text="Go.", legal_actions=legal)

    def parse_action(self, player, text):
        return text.strip() or None

    def step(self, actions):
        self.done, self.heads = True, actions[0] == "heads"
        return {0: 0.0, 1: 0.0}

    def is_terminal(self):
        return self.done

    def returns(self):
        return [1.0, -1.0] if self.heads else [-1.0, 1.0]


def test_a_penalty_beside_a_forfeit_stays_on_its_turn():
    # Seat 0's bad call is penalised (it has legal moves to pick from); seat 1's empty
    # message can only forfeit. Both happen in one round.
    cfg = InvalidActionConfig(on_fail="penalty", penalty=-0.5)
    caller = Scripted(["nonsense"], policy_id="caller")
    ep = play_episodes(Call, [[caller, Writer([""])]], [0], invalid=cfg)[0]
    assert ep.forfeited_by == 1 and ep.returns == (0.5, -1.0)
    (penalised,) = ep.trajectories[0].turns
    assert penalised.treatment == "penalty" and penalised.reward == 0.5  # -0.5 + the win
    for traj in ep.trajectories:
        assert sum(t.reward for t in traj.turns) == pytest.approx(traj.ret)


def test_simultaneous_moves_collect_every_player():
    r = RandomPolicy(seed=1)
    make = lambda: make_env("openspiel:matrix_pd")  # noqa: E731
    ep = play_episodes(make, [[r, r]], [0])[0]
    assert [len(t.turns) for t in ep.trajectories] == [1, 1]
    assert ep.turns[0].step == ep.turns[1].step == 0


def test_truncation_marks_episode():
    r = RandomPolicy(seed=2)
    ep = play_episodes(lambda: make_env("tic_tac_toe"), [[r, r]], [0], max_turns=2)[0]
    assert ep.truncated and ep.num_steps == 2


def test_seating_must_fill_every_seat():
    with pytest.raises(ValueError, match="2 seats"):
        play_episodes(kuhn, [[FirstLegal()]], [0])


class Shout:
    """One player writes one free-text message; an empty message is not one."""

    spec = GameSpec(
        name="shout",
        num_players=1,
        kind=GameKind.COOPERATIVE,
        max_turns=1,
        perfect_information=True,
        min_return=-1.0,
        max_return=1.0,
    )

    def reset(self, seed):
        self.said = None

    def players_to_act(self):
        return [] if self.said is not None else [0]

    def observe(self, player):
        return Observation(game="shout", player=0, text="Say something.", legal_actions=None)

    def parse_action(self, player, text):
        return text.strip() or None

    def step(self, actions):
        said = self.parse_action(0, actions[0])
        if said is None:
            raise ValueError("not a message")
        self.said = said
        return {0: 0.0}

    def is_terminal(self):
        return self.said is not None

    def returns(self):
        return [1.0]


class Writer:
    """Writes the given texts in turn as free-text messages (``well_formed``: what its
    answer format says of each; None where it has none)."""

    policy_id = "writer"
    version = 0

    def __init__(self, texts, well_formed=None):
        self.texts = iter(texts)
        self.well_formed = well_formed

    def act(self, observations):
        return [
            Decision(
                text=(t := next(self.texts)),
                action=t,
                policy_id="writer",
                well_formed=self.well_formed,
            )
            for _ in observations
        ]


def test_a_message_the_game_rejects_gets_the_invalid_treatment():
    ep = play_episodes(
        Shout, [[Writer(["   ", "hello"])]], [0], invalid=InvalidActionConfig(retries=1)
    )[0]
    turn = ep.turns[0]
    assert turn.treatment == "retry" and turn.played_action == "hello"
    assert [d.text for d in turn.invalid_attempts] == ["   "]
    assert not turn.invalid_attempts[0].valid
    lost = play_episodes(Shout, [[Writer([""])]], [0])[0]
    assert lost.forfeited_by == 0 and lost.returns == (-1.0,)


@pytest.mark.parametrize(("formed", "rejected"), [(True, False), (None, None)])
def test_a_message_the_game_rejects_is_not_well_formed(formed, rejected):
    # Written in its format but refused by the game: it kept well_formed=True, and the
    # format reward paid it instead of model.text.format_penalty.
    writer = Writer(["   ", "hello"], well_formed=formed)
    (ep,) = play_episodes(Shout, [[writer]], [0], invalid=InvalidActionConfig(retries=1))
    turn = ep.turns[0]
    assert [d.well_formed for d in turn.invalid_attempts] == [rejected]
    assert turn.decision.well_formed is formed  # the accepted one keeps its mark


def test_a_message_is_recorded_as_the_game_read_it():
    # The decision keeps what was written; the turn records what the game played and
    # showed, which metrics and the message-swap evaluation read (the raw text used to
    # stand there, so "[Defect] " read as a move to the metrics).
    ep = play_episodes(Shout, [[Writer(["  hello  "])]], [0])[0]
    turn = ep.turns[0]
    assert turn.decision.action == "  hello  " and turn.played_action == "hello"


def test_openings_assign_the_first_move_after_the_prefix_only():
    from coplay.types import Opening

    ttt = lambda: make_env("tic_tac_toe")  # noqa: E731
    me = SteeredFirst()
    prefix = (((0, "[4]"),),)
    openings = [Opening(player=1, index=i) for i in range(10)]
    eps = play_episodes(ttt, [[me, me]] * 10, [0] * 10, prefixes=[prefix] * 10, openings=openings)
    firsts = [e.trajectories[1].turns[0] for e in eps]
    assert all(t.step == 1 for t in firsts)
    legal = firsts[0].observation.legal_actions
    assert [t.played_action for t in firsts] == [legal[i % 8] for i in range(10)]
    assert me.forced == [list(range(10))]  # one batched call, and only at the opening
    # Later moves are sampled as usual: the first legal action each time.
    assert all(t.played_action == t.observation.legal_actions[0] for e in eps for t in e.turns[1:])


def test_an_opening_needs_a_policy_that_can_be_told_its_move():
    from coplay.types import Opening

    with pytest.raises(ValueError, match="'first' in seat 0 cannot"):
        play_episodes(kuhn, [[FirstLegal(), FirstLegal()]], [0], openings=[Opening(0, 1)])
    me = SteeredFirst()
    with pytest.raises(ValueError, match=r"player 1's, but players \[0\] are to act"):
        play_episodes(kuhn, [[me, me]], [0], openings=[Opening(1, 0)])
    with pytest.raises(ValueError, match=r"player 5's, but players \[0\] are to act"):
        play_episodes(kuhn, [[me, me]], [0], openings=[Opening(5, 0)])


class PaidBeforeActing:
    """Simultaneous moves: player 1 is paid 1 (player 0 pays it) at the first step,
    before it first acts at the second."""

    spec = GameSpec(
        "toy", 2, GameKind.ZERO_SUM, 5, True, min_return=-1, max_return=1, simultaneous=True
    )

    def reset(self, seed):
        self.t, self.ret = 0, [0.0, 0.0]

    def players_to_act(self):
        return [0] if self.t == 0 else [0, 1]

    def observe(self, p):
        return Observation(game="toy", player=p, text=f"t{self.t}", legal_actions=("[a]",))

    def parse_action(self, p, text):
        return "[a]" if text == "[a]" else None

    def step(self, actions):
        self.t += 1
        if self.t == 1:
            self.ret = [-1.0, 1.0]
            return {0: -1.0, 1: 1.0}
        return {0: 0.0, 1: 0.0}

    def is_terminal(self):
        return self.t >= 3

    def returns(self):
        return list(self.ret)


def test_a_reward_paid_before_a_first_turn_survives_a_forfeit_that_ends_the_round():
    # Player 0 forfeits in the round of player 1's first turn: the forfeit's returns
    # equal what was credited, so no residual carried player 1's held reward to a turn.
    p0 = Scripted(["[a]", "no"], policy_id="p0")
    p1 = Scripted(["[a]"], policy_id="p1")
    ep = play_episodes(PaidBeforeActing, [[p0, p1]], [0])[0]
    assert ep.forfeited_by == 0
    for traj in ep.trajectories:
        assert sum(t.reward for t in traj.turns) == pytest.approx(traj.ret)
    assert ep.trajectories[1].ret == 1.0


class PaysNoNumber(PaidBeforeActing):
    """A game that pays a return that is not a number, at its end or along the way."""

    def __init__(self, at_end: bool = True):
        self.at_end = at_end

    def step(self, actions):
        paid = super().step(actions)
        return paid if self.at_end or self.t != 2 else {0: float("nan"), 1: 0.0}

    def returns(self):
        return [float("inf"), 0.0] if self.at_end else list(self.ret)


@pytest.mark.parametrize("at_end", [True, False])
def test_a_return_that_is_not_a_number_is_refused(at_end):
    # Every advantage of the batch would be NaN, and the update would spread it to the weights.
    with pytest.raises(ValueError, match="game toy paid player 0 a return of .*must be finite"):
        play_episodes(lambda: PaysNoNumber(at_end), [[FirstLegal(), FirstLegal()]], [0])


class Lowercase:
    """Names its first legal action lowercased: a move the game's own parser reads, but
    not one of the listed actions a decision must name."""

    policy_id = "lower"
    version = 0

    def act(self, observations):
        moves = [o.legal_actions[0].lower() for o in observations]
        return [Decision(text=m, action=m, policy_id=self.policy_id) for m in moves]


def test_a_decision_naming_an_unlisted_action_is_refused_in_one_line():
    # It was played as the game parsed it and recorded as written ('[pass]'), a
    # history that no restart could replay.
    with pytest.raises(ValueError, match=r"^policy 'lower' in seat 0 of kuhn_poker answered "):
        play_episodes(kuhn, [[Lowercase(), FirstLegal()]], [0])
    match = r"'\[Raise\]', which is not one of its legal actions \(\[Pass\] \[Bet\]\)"
    with pytest.raises(ValueError, match=match):
        play_episodes(kuhn, [[Scripted(["[Bet]"]), Writer(["[Raise]"])]], [0])


class ReturnsPerSeat(PaidBeforeActing):
    """Returns one entry too many or too few."""

    def __init__(self, extra: int):
        self.extra = extra

    def returns(self):
        paid = super().returns()
        return paid + [0.0] * self.extra if self.extra > 0 else paid[: self.extra]


class PaysSeat(PaidBeforeActing):
    """Pays a step reward to a player the game does not have."""

    def __init__(self, seat: int):
        self.seat = seat

    def step(self, actions):
        return {**super().step(actions), self.seat: 1.0}


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: ReturnsPerSeat(1), r"^game toy returned 3 returns for its 2 players$"),
        (lambda: ReturnsPerSeat(-1), r"^game toy returned 1 returns for its 2 players$"),
        (lambda: PaysSeat(2), r"^game toy paid step rewards to players \[0, 1, 2\]; its players"),
        (lambda: PaysSeat(-1), r"^game toy paid step rewards to players \[0, 1, -1\]"),
    ],
    ids=["one_return_too_many", "one_return_too_few", "seat_past_the_last", "seat_minus_one"],
)
def test_a_game_paying_players_it_does_not_have_is_refused_in_one_line(make, match):
    # Too few returns, or a seat past the last, failed as a bare IndexError; too many
    # were ignored, and seat -1's reward went silently to the last seat's turn.
    with pytest.raises(ValueError, match=match):
        play_episodes(make, [[FirstLegal(), FirstLegal()]], [0])


class DecidedByDeal:
    """Zero-sum, over at its deal: player 0 wins 1 before anyone acts."""

    spec = GameSpec("deal", 2, GameKind.ZERO_SUM, 3, False, min_return=-1, max_return=1)

    def reset(self, seed):
        pass

    def players_to_act(self):
        return []

    def is_terminal(self):
        return True

    def returns(self):
        return [1.0, -1.0]


def test_a_game_over_before_anyone_acts_keeps_the_games_returns():
    # It was recorded as (0, 0): the game's end was never read.
    (ep,) = play_episodes(DecidedByDeal, [[FirstLegal(), FirstLegal()]], [0])
    assert ep.returns == (1.0, -1.0) and ep.num_steps == 0 and not ep.turns
