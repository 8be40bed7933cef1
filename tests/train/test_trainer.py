"""The trainer: a run's parts built from its config, and whole runs end to end."""

import json

import pytest
import torch

from coplay.envs.registry import make_env
from coplay.models.loading import load_policy
from coplay.train import hooks, trainer
from coplay.train.checkpoints import rundir
from coplay.train.checkpoints.safe_tree import load_tree
from coplay.train.checkpoints.state import state_records
from coplay.train.config import ConfigError
from coplay.train.parts.planning import Explore, Restarts
from coplay.train.parts.seating import Against, SelfPlay
from coplay.train.settings import build_config
from coplay.train.trainer import (
    check_weights,
    game_text,
    setup,
    train,
    wants_exact,
)
from tests.train.runs import TINY, rows


def test_game_text_lists_the_observations_and_every_action_of_random_play():
    text = game_text(lambda: make_env("kuhn_poker"), episodes=20)
    assert text.actions == ["[Bet]", "[Pass]"]
    assert len(text.texts) >= 2 * 20  # at least two turns a game


def test_setup_builds_a_self_play_run_and_its_directory(tmp_path):
    run = setup(build_config(overrides=TINY), tmp_path / "run")
    me = run.learner_ids[0]
    assert run.seating == SelfPlay(me, 2) and list(run.policies) == [me]
    assert run.planning == {} and run.plan_states == {} and run.eval_opponents == {}
    assert run.exact and run.exact_matches == () and not run.scope
    assert run.trainees[0].critic is None and run.trainees[0].learner.reference is None
    assert (tmp_path / "run" / "config.yaml").is_file()
    assert (tmp_path / "run" / "metrics.jsonl").read_text() == ""
    setup(build_config(overrides=TINY), tmp_path / "resumed", fresh=False)
    assert not (tmp_path / "resumed").exists()  # a resume writes nothing before its state


def test_setup_seats_a_fixed_opponent_and_builds_the_configured_parts(tmp_path):
    over = [
        *TINY,
        "train.opponent={name: random, seat_weights: [1, 3]}",
        "train.eval_opponents=[random, nash]",
        "rollout.group_size=2",
        "rollout.explore={share: 0.2, tis_cap: 2.0}",
        "rollout.restarts={share: 0.5, exploring_starts: {target: {coef: 1}}}",
        "algo.estimator=gae",
        "algo.params={}",
        "magnet.ema=0.1",
    ]
    run = setup(build_config(overrides=over), tmp_path)
    me = run.learner_ids[0]
    assert run.seating == Against(me, "random", 2, (1.0, 3.0))
    assert set(run.policies) == {me, "random"} and list(run.eval_opponents) == ["random", "nash"]
    assert run.exact_matches == ("nash",)  # auto: the optimal bot, where exact is on
    assert isinstance(run.planning["explore"], Explore)
    assert isinstance(run.planning["restarts"], Restarts)
    assert run.plan_states["restarts"].buffer == []
    trainee = run.trainees[0]
    assert trainee.critic is not None  # GAE reads values
    learner = trainee.learner
    assert learner.tis_cap == 2.0 and "target" in learner.terms
    assert learner.reference is not None and learner.terms["kl"].ema == 0.1


def test_uncorrected_exploration_trains_without_a_cap(tmp_path):
    over = [*TINY, "rollout.explore={share: 0.2, tis_cap: null}"]
    assert setup(build_config(overrides=over), tmp_path).trainees[0].learner.tis_cap is None


@pytest.mark.parametrize("mode", ["text", "choice"])
def test_an_engines_answers_are_corrected_by_the_text_cap(tmp_path, mode):
    # The cap once lived in rollout.explore alone, which needs choices: an inference
    # engine's written answers could not be corrected at all. In choice mode the
    # messages of talk games (negotiation, signalling) are written answers too.
    over = [*TINY, f"model.mode={mode}", "model.text.tis_cap=2.0"]
    assert setup(build_config(overrides=over), tmp_path).trainees[0].learner.tis_cap == 2.0


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        (["rollout.explore.share=0.1"], "cannot go with rollout.explore"),
        (["model.text.tis_cap=0.5"], "tis_cap=0.5 below 1 would weight every choice"),
    ],
)
def test_a_text_cap_that_cannot_act_as_set_is_refused_before_writing(tmp_path, extra, match):
    # The learner holds one cap: exploration's would take it, and a cap below 1 would
    # weight every choice (whose ratio is 1) by it as well.
    over = [*TINY, "model.mode=choice", "model.text.tis_cap=2.0", *extra]
    with pytest.raises(ConfigError, match=match):
        setup(build_config(overrides=over), tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("full_disk", [False, True])
def test_ctrl_c_in_the_first_evaluation_closes_the_loggers_and_says_what_was_saved(
    tmp_path, monkeypatch, full_disk
):
    closed = []

    class Loggers:
        def log(self, step, row):
            pass

        def close(self):
            closed.append(True)
            if full_disk:  # closed in a ``finally``, its error replaced the interruption
                raise OSError(28, "No space left on device")

    def interrupted(run):
        raise KeyboardInterrupt

    monkeypatch.setattr(hooks, "open_loggers", lambda sinks, opening: Loggers())
    monkeypatch.setattr(trainer, "evaluate", interrupted)
    with pytest.raises(KeyboardInterrupt) as caught:  # a bare one would stop pytest itself
        train(build_config(overrides=TINY), tmp_path)
    assert isinstance(caught.value, rundir.RunInterrupted)
    assert "before any state was saved" in str(caught.value) and closed == [True]


def test_train_writes_the_run_directory(tmp_path):
    summary = train(build_config(overrides=[*TINY, "train.eval_every=1"]), tmp_path)
    logged = rows(tmp_path / "metrics.jsonl")
    assert [r["iteration"] for r in logged] == [0, 1, 2]
    assert summary["iterations"] == 2 and summary["game"] == "kuhn_poker"
    assert summary["final/eval/exploitability"] == logged[-1]["eval/exploitability"]
    assert summary["initial/eval/exploitability"] == logged[0]["eval/exploitability"]
    assert json.loads((tmp_path / "summary.json").read_text())["iterations"] == 2
    assert (tmp_path / "checkpoints" / "final").is_dir() and (tmp_path / "state").is_dir()
    assert len((tmp_path / "transcripts.jsonl").read_text().splitlines()) == 2 * 4


def test_stopping_early_saves_the_state_but_no_final_checkpoint(tmp_path):
    cfg = build_config(overrides=[*TINY, "train.save_every=0"])
    summary = train(cfg, tmp_path, stop_after=1)
    assert summary["iterations"] == 1 and (tmp_path / "state").is_dir()
    assert not (tmp_path / "checkpoints" / "final").exists()
    train(cfg, tmp_path, resume=True)
    assert (tmp_path / "checkpoints" / "final").is_dir()


def test_resume_without_state_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no saved state"):
        train(build_config(overrides=TINY), tmp_path / "empty", resume=True)


def test_a_users_own_game_trains_by_module_path(tmp_path):
    over = [*TINY, "game.name=examples.bidding:make", "rollout.group_size=1"]
    summary = train(build_config(overrides=over), tmp_path / "own")
    assert summary["game"] == "examples.bidding:make"
    logged = (tmp_path / "own" / "metrics.jsonl").read_text().splitlines()
    assert len(logged) == 3  # the initial evaluation and two iterations


def test_an_unknown_module_game_is_a_config_error():
    with pytest.raises(ConfigError, match="no_such_pkg"):
        build_config(overrides=[*TINY, "game.name=no_such_pkg.mod:make"])


def test_seat_weights_bad_input(tmp_path):
    def opponent(weights):
        return [*TINY, f"train.opponent={{name: random, seat_weights: {weights}}}"]

    with pytest.raises(ConfigError, match=r"seat_weights must be >= 0 and not all 0, got \[0"):
        build_config(overrides=opponent("[0, 0]"))
    with pytest.raises(ConfigError, match="seat_weights must be >= 0"):
        build_config(overrides=opponent("[-1, 2]"))
    with pytest.raises(ConfigError, match="seat_weights must be finite numbers"):
        build_config(overrides=opponent("[.nan, 1]"))  # sat every group in seat 0
    cfg = build_config(overrides=opponent("[1, 2, 3]"))
    with pytest.raises(ValueError, match="3 weights; kuhn_poker has 2 seats"):
        setup(cfg, tmp_path / "a")
    # self-play has no seat to weigh: the old key says where seat weights live now
    with pytest.raises(ConfigError, match="train.seat_weights is now train.opponent.seat_weights"):
        build_config(overrides=[*TINY, "train.seat_weights=[1, 1]"])


def test_check_weights_gives_one_weight_per_seat():
    spec = make_env("kuhn_poker").spec
    assert check_weights([1, 3], spec) == (1, 3) and check_weights(None, spec) is None
    with pytest.raises(ValueError, match="1 weights; kuhn_poker has 2 seats"):
        check_weights([1], spec)


def test_the_opponent_is_a_name_or_a_section_and_self_play_is_unset():
    assert build_config(overrides=TINY).train.opponent is None
    by_name = build_config(overrides=[*TINY, "train.opponent=nash"]).train.opponent
    section = build_config(overrides=[*TINY, "train.opponent={name: nash}"]).train.opponent
    assert by_name == section and by_name.name == "nash" and by_name.seat_weights is None
    with pytest.raises(ConfigError, match="self-play is now the default: leave it unset"):
        build_config(overrides=[*TINY, "train.opponent=self"])


@pytest.mark.parametrize(
    ("game", "mode", "expected"),
    [
        ("kuhn_poker", "auto", True),
        ("kuhn_poker", "off", False),
        ("tic_tac_toe", "auto", False),  # perfect information: matches, not exploitability
        ("openspiel:liars_dice", "auto", False),  # 294,883 histories: over the auto limit
        ("openspiel:liars_dice", "on", True),
    ],
)
def test_exact_evaluation_follows_train_exact(game, mode, expected):
    cfg = build_config(overrides=[f"game.name={game}", f"train.exact={mode}"])
    assert wants_exact(cfg, make_env(game).spec) is expected


def test_exact_on_for_a_game_without_it_is_a_clear_error():
    cfg = build_config(overrides=["game.name=tic_tac_toe", "train.exact=on"])
    with pytest.raises(ValueError, match="train.exact=on needs an imperfect-information"):
        wants_exact(cfg, make_env("tic_tac_toe").spec)


def test_a_magnet_final_policy_is_saved_and_evaluated(tmp_path):
    over = [*TINY, "loss.kl.coef=0.1", "magnet={ema: 0.5, final: true}"]
    summary = train(build_config(overrides=over), tmp_path)
    row = rows(tmp_path / "metrics.jsonl")[-1]
    assert row["eval/exploitability"] == summary["final/eval/exploitability"]
    assert row["eval/learner/exploitability"] != row["eval/exploitability"]
    state = load_tree(tmp_path / "state", "run", records=state_records())
    (learner,) = state["trainees"].values()
    magnet = learner["terms"]["kl"]["weights"]
    saved = load_policy(tmp_path).model.state_dict()
    assert all(torch.equal(saved[k], v) for k, v in magnet.items())
    (weights,) = state["models"].values()  # the learner's own, which differ from the magnet
    assert not all(torch.equal(weights[k], v) for k, v in magnet.items())


def test_a_text_run_in_chat_context_trains_and_logs_its_format_reward(tmp_path):
    overrides = [
        *TINY,
        "model.mode=text",
        "model.max_new_tokens=6",
        "model.text.context=chat",
        "model.text.format_penalty=-0.25",
        "game.invalid.on_fail=penalty",
    ]
    train(build_config(overrides=overrides), tmp_path / "run")
    logged = rows(tmp_path / "run" / "metrics.jsonl")[1:]
    assert all("eval/exploitability" not in r for r in logged)
    for r in logged:
        # nothing the random model writes is well formed: the penalty on every answer
        assert r["rollout/well_formed"] == 0.0
        assert r["rollout/format_reward"] <= -0.25


def test_ctrl_c_while_a_resume_loads_leaves_the_saved_run_to_resume_again(tmp_path, monkeypatch):
    # RunInterrupted without a saved iteration would say to start the run again.
    cfg = build_config(overrides=TINY)
    train(cfg, tmp_path, stop_after=1)

    def interrupted(run, hooks):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "load_state", interrupted)
    with pytest.raises(KeyboardInterrupt) as caught:
        train(cfg, tmp_path, resume=True)
    assert not isinstance(caught.value, rundir.RunInterrupted)
    monkeypatch.undo()
    assert train(cfg, tmp_path, resume=True)["iterations"] == 2


def test_the_python_api_refuses_a_folder_that_holds_a_run_unless_forced(tmp_path):
    # The command line refuses it (claim); train() did not, and wrote a new run's logs
    # beside the old run's checkpoints.
    cfg = build_config(overrides=[*TINY, "train.iterations=1", "train.save_every=1"])
    out = tmp_path / "run"
    train(cfg, out)
    before = sorted(p.name for p in (out / "checkpoints").iterdir())
    with pytest.raises(rundir.RunDirError, match=r"already holds a run; continue it with resume="):
        train(cfg, out)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == before
    train(cfg, out, force=True)
    (old,) = tmp_path.glob("run.old-*")
    assert (old / "metrics.jsonl").is_file() and (out / "metrics.jsonl").is_file()
