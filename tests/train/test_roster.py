"""Rosters: build-time checks, seat wiring, per-learner samples and settings, frozen members."""

import json

import numpy as np
import pytest
import torch

from coplay.models.loading import save_policy
from coplay.models.lora import AdapterPolicy, load_roles
from coplay.train import trainee as trainee_mod
from coplay.train.config import ConfigError
from coplay.train.loop import make_plan, observe, rollout_report
from coplay.train.roster import load_roster, setup_roster, train_roster, validate_roster
from coplay.train.settings import build_config
from tests.train.rosters import TINY, TWO_ROLES


def _play(run, it):
    """One iteration's games of the roster run and its rollout metrics."""
    plan, _ = make_plan(run, it)
    batch = run.source.play(plan, run.policies)
    return batch.episodes, rollout_report(run, batch)


def _trainee(run, name):
    return next(t for t in run.trainees if t.name == name)


def _params(module):
    return [p.detach().clone() for p in module.parameters()]


def _max_change(before, module):
    return max(float((b - a).abs().max()) for b, a in zip(before, module.parameters(), strict=True))


# --- build-time checks ------------------------------------------------------------------


def test_roster_must_seat_every_player_of_the_game(tmp_path):
    cfg = validate_roster({"policies": {"a": {"kind": "learner"}}, "seats": ["a", "a", "a"]})
    with pytest.raises(ValueError, match="seats 3 players but 'kuhn_poker' has 2"):
        setup_roster(cfg, build_config(overrides=TINY), tmp_path)


def test_a_roster_replaces_train_opponent(tmp_path):
    with pytest.raises(ValueError, match="a roster seats the opponents; leave train.opponent"):
        setup_roster(
            validate_roster(TWO_ROLES),
            build_config(overrides=[*TINY, "train.opponent=random"]),
            tmp_path,
        )


def test_a_lora_roster_refuses_a_magnet(tmp_path):
    cfg = build_config(overrides=[*TINY, "magnet.ema=0.1"])
    with pytest.raises(ValueError, match="magnet needs a copy of the weights"):
        setup_roster(validate_roster({**TWO_ROLES, "lora": {"rank": 2}}), cfg, tmp_path)


def test_learners_needing_groups_are_rejected_with_groups_of_one(tmp_path):
    data = {
        "policies": {"a": {"kind": "learner", "algo": {"estimator": "grpo"}}},
        "seats": ["a", "a"],
    }
    cfg = build_config(overrides=[*TINY, "rollout.group_size=2", "algo.estimator=rae"])
    cfg = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"group_size": 1})})
    with pytest.raises(ValueError, match="group_size >= 2"):
        setup_roster(validate_roster(data), cfg, tmp_path)


# --- wiring -------------------------------------------------------------------------------


def test_each_seat_gets_its_policy_and_rotation_shifts_by_group(tmp_path):
    data = {
        "policies": {"me": {"kind": "learner"}, "bot": {"kind": "bot", "name": "random"}},
        "seats": ["me", "bot"],
    }
    run = setup_roster(validate_roster(data), build_config(overrides=TINY), tmp_path / "a")
    assert run.policies["me"].policy_id == "me" and run.policies["bot"].policy_id == "bot"
    assert run.seating.rows(3, run.rng) == [("me", "bot")] * 3
    rotated = setup_roster(
        validate_roster({**data, "rotate": True}), build_config(overrides=TINY), tmp_path / "b"
    )
    assert rotated.seating.rows(4, run.rng) == [("me", "bot"), ("bot", "me")] * 2
    # Games of one group (same seed) keep one seating, so group baselines compare alike.
    rotated.cfg = build_config(overrides=[*TINY, "rollout.group_size=2"])
    plan, _ = make_plan(rotated, 1)
    assert (
        plan.seatings
        == (("me", "bot"),) * 2 + (("bot", "me"),) * 2 + (("me", "bot"),) * 2 + (("bot", "me"),) * 2
    )
    assert [t.name for t in run.trainees] == ["me"]


def test_shared_weight_self_play_is_one_learner_in_every_seat(tmp_path):
    data = {"policies": {"me": {"kind": "learner"}}, "seats": ["me", "me"]}
    run = setup_roster(validate_roster(data), build_config(overrides=TINY), tmp_path)
    assert run.seating.rows(2, run.rng) == [("me", "me"), ("me", "me")]
    episodes, _ = _play(run, 1)
    metrics = _trainee(run, "me").learn(episodes, run.rng)
    # Both seats' decisions reach the one learner: 8 games of Kuhn have >= 16 decisions.
    assert metrics["loss/steps"] == 1.0
    assert sum(len(t.decision.logprobs) > 0 for e in episodes for t in e.turns) >= 16


def test_only_a_learners_own_decisions_reach_its_update(tmp_path, monkeypatch):
    seen: dict[str, list[str]] = {}
    real = trainee_mod.update

    def spy(learner, samples, rng):
        seen[learner.policy.policy_id] = [s.decision.policy_id for s in samples]
        return real(learner, samples, rng)

    monkeypatch.setattr(trainee_mod, "update", spy)
    run = setup_roster(validate_roster(TWO_ROLES), build_config(overrides=TINY), tmp_path)
    episodes, metrics = _play(run, 1)
    for trainee in run.trainees:
        trainee.learn(episodes, run.rng)
    for name in ("first", "second"):
        own = [t for e in episodes for t in e.turns if t.decision.policy_id == name]
        assert seen[name] == [name] * len(own)
        assert own and all(t.player == ("first", "second").index(name) for t in own)
    assert "rollout/first/return_seat0" in metrics and "rollout/second/return_seat1" in metrics


def test_per_role_settings_reach_their_own_learner(tmp_path):
    data = {
        "policies": {
            "first": {"kind": "learner", "optim": {"lr": 0.05, "epochs": 3, "minibatch_size": 4}},
            "second": {"kind": "learner", "optim": {"lr": 1e-12}, "algo": {"estimator": "rloo"}},
        },
        "seats": ["first", "second"],
    }
    cfg = build_config(overrides=[*TINY, "rollout.group_size=2"])  # rloo needs groups
    run = setup_roster(validate_roster(data), cfg, tmp_path)
    first, second = _trainee(run, "first"), _trainee(run, "second")
    assert first.learner.epochs == 3 and second.learner.epochs == 1
    assert second.algo.estimator == "rloo" and first.algo.estimator == "rae"
    assert first.policy.model is not second.policy.model
    b1, b2 = _params(first.policy.model), _params(second.policy.model)
    episodes, _ = _play(run, 1)
    m1 = first.learn(episodes, run.rng)
    m2 = second.learn(episodes, run.rng)
    assert m1["loss/lr"] == 0.05 and m2["loss/lr"] == 1e-12
    assert m1["loss/steps"] > m2["loss/steps"] == 1.0
    assert _max_change(b1, first.policy.model) > 1e-3
    assert _max_change(b2, second.policy.model) < 1e-8


def test_a_learners_partial_sections_keep_the_runs_other_settings(tmp_path):
    # A learner's optim: {lr: ...} reset its schedule, epochs ... to the defaults, not
    # the run's; and so did a partial loss term section.
    data = {
        "policies": {
            "first": {"kind": "learner", "optim": {"lr": 0.002}, "loss": {"kl": {"coef": 0.3}}},
            "second": {"kind": "learner", "algo": {"estimator": "rloo"}},
            "third": {"kind": "learner", "optim": None, "loss": {"kl": None}},
        },
        "seats": ["first", "second", "third"],
    }
    over = [
        *TINY,
        "game.name=kuhn_poker",
        "game.params={players: 3}",
        "rollout.group_size=2",
        "optim.lr=0.01",
        "optim.epochs=2",
        "optim.lr_schedule=linear",
        "loss.kl={coef: 0.1, estimator: k2}",
        "algo.estimator=grpo",
        "algo.params={scale_by_std: false}",
    ]
    run = setup_roster(validate_roster(data), build_config(overrides=over), tmp_path)
    first, second, third = (_trainee(run, n) for n in ("first", "second", "third"))
    assert first.learner.optimizer.param_groups[0]["lr"] == 0.002
    assert second.learner.optimizer.param_groups[0]["lr"] == 0.01
    for t in (first, second, third):
        assert t.learner.epochs == 2 and t.learner.scheduler is not None
    assert first.learner.loss.kl.coef == 0.3 and first.learner.loss.kl.estimator == "k2"
    assert second.learner.loss.kl.coef == 0.1 and third.learner.loss.kl is None
    # An estimator's parameters are its own: another estimator starts from its defaults.
    assert first.algo.params == {"scale_by_std": False}
    assert second.algo.estimator == "rloo" and second.algo.params == {}
    # roster.yaml keeps what the roster gave, so a resumed run fills in the rest from
    # its own config as this one did (it held every default, which then won).
    saved = load_roster(tmp_path / "roster.yaml")
    again = setup_roster(saved, build_config(overrides=over), tmp_path, fresh=False)
    for t in again.trainees:
        assert t.learner.epochs == 2 and t.learner.scheduler is not None, t.name
        assert t.learner.loss == _trainee(run, t.name).learner.loss
        assert t.algo == _trainee(run, t.name).algo


def test_a_learner_section_that_does_not_fit_the_run_names_the_learner(tmp_path):
    data = {"policies": {"a": {"kind": "learner", "algo": {"estimator": "grpo"}}}}
    cfg = build_config(overrides=[*TINY, "algo.estimator=rae"])  # groups of one
    with pytest.raises(ConfigError, match=r"^learner 'a': .*set rollout.group_size >= 2") as err:
        setup_roster(validate_roster({**data, "seats": ["a", "a"]}), cfg, tmp_path)
    assert "\n" not in str(err.value)


def test_a_learner_started_from_a_checkpoint_plays_as_the_run_says(tmp_path):
    # The checkpoint brings the weights; its own sampling and text settings are not
    # this run's (it loaded them, and a CPU device, from the checkpoint before).
    saved_cfg = build_config(overrides=[*TINY, "model.temperature=0.5"])
    saved = setup_roster(validate_roster(TWO_ROLES), saved_cfg, tmp_path / "saved")
    save_policy(_trainee(saved, "first").policy, tmp_path / "ckpt")
    data = {**TWO_ROLES, "policies": {**TWO_ROLES["policies"]}}
    data["policies"]["first"] = {"kind": "learner", "init": str(tmp_path / "ckpt")}
    over = [*TINY, "model.temperature=2.0", "model.text.answer=bracket"]
    run = setup_roster(validate_roster(data), build_config(overrides=over), tmp_path / "run")
    first = _trainee(run, "first").policy
    assert first.policy_id == "first"
    assert first.temperature == 2.0 and first.text.answer == "bracket"
    assert first.text == _trainee(run, "second").policy.text
    own = _trainee(saved, "first").policy.model.parameters()
    assert all(torch.equal(a, b) for a, b in zip(first.model.parameters(), own, strict=True))


def test_frozen_snapshots_and_bots_never_change(tmp_path):
    cfg = build_config(overrides=TINY)
    run = setup_roster(
        validate_roster({"policies": {"me": {"kind": "learner"}}, "seats": ["me", "me"]}),
        cfg,
        tmp_path / "src",
    )
    save_policy(run.policies["me"], tmp_path / "snap")
    data = {
        "policies": {
            "me": {"kind": "learner", "optim": {"lr": 0.05}},
            "snap": {"kind": "frozen", "path": str(tmp_path / "snap")},
            "nash": {"kind": "bot", "name": "nash"},
        },
        "seats": {"me": [0], "snap": [1]},
    }
    with pytest.raises(ConfigError, match="bot 'nash' is listed but never seated"):
        validate_roster(data)
    del data["policies"]["nash"]
    run = setup_roster(validate_roster({**data, "rotate": True}), cfg, tmp_path / "run")
    snap, me = run.policies["snap"], _trainee(run, "me")
    assert [t.name for t in run.trainees] == ["me"]
    assert not any(p.requires_grad for p in snap.model.parameters())
    frozen, mine = _params(snap.model), _params(me.policy.model)
    for it in (1, 2):
        episodes, _ = _play(run, it)
        me.learn(episodes, run.rng)
    assert _max_change(frozen, snap.model) == 0.0
    assert _max_change(mine, me.policy.model) > 1e-3
    assert snap.version == 0 and me.policy.version == 2
    assert {t.player for e in episodes for t in e.turns if t.decision.policy_id == "snap"} == {0, 1}


# --- whole runs ---------------------------------------------------------------------------


def test_two_lora_roles_train_on_one_frozen_base(tmp_path):
    data = {**TWO_ROLES, "lora": {"rank": 2}}
    cfg = build_config(overrides=[*TINY, "optim.lr=0.05"])
    summary = train_roster(validate_roster(data), cfg, tmp_path)
    assert 0 <= summary["final/eval/exploitability"] <= 2.0
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2]
    assert {"loss/first/total", "loss/second/total"} <= set(rows[1])
    final = tmp_path / "checkpoints" / "final"
    views = load_roles(final, ("first", "second"))
    assert isinstance(views["first"], AdapterPolicy)
    a, b = (torch.cat([p.flatten() for p in views[r].adapter_parameters()]) for r in views)
    assert float(a.abs().max()) > 0 and float((a - b).abs().max()) > 0
    assert (final / "base" / "config.json").is_file()


def test_run_writes_the_roster_and_per_role_evaluations(tmp_path):
    data = {
        "policies": {"me": {"kind": "learner"}, "bot": {"kind": "bot", "name": "random"}},
        "seats": ["me", "bot"],
        "rotate": True,
    }
    cfg = build_config(overrides=[*TINY, "train.iterations=1", "train.eval_opponents=[nash]"])
    summary = train_roster(validate_roster(data), cfg, tmp_path)
    assert (tmp_path / "roster.yaml").read_text().count("kind:") == 2
    assert np.isfinite(summary["final/eval/me/nash/mean_return"])
    # Against Nash, no strategy beats the game value -1/18 in seat 0 (Kuhn poker).
    assert summary["final/eval/me/nash/exact_value_seat0"] <= -1 / 18 + 1e-6
    assert "final/eval/me/exploitability" in summary
    assert (tmp_path / "checkpoints" / "final" / "me" / "config.json").is_file()


def test_a_roster_with_restarts_and_exploration_trains_each_learner(tmp_path):
    # Refused before the loop was one: restarts now replay a lost position with the
    # seats of the game it was lost in, exploration mixes into every learner.
    over = [
        *TINY,
        "train.iterations=3",
        "train.eval_every=3",
        "rollout.games_per_iter=16",
        "rollout.group_size=2",
        "rollout.restarts={share: 0.5}",
        "rollout.explore={share: 0.2}",
    ]
    train_roster(validate_roster(TWO_ROLES), build_config(overrides=over), tmp_path)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]
    assert rows[1]["rollout/restart_groups"] == 0.0  # nothing lost yet to restart from
    assert rows[1]["rollout/restart_buffer"] > 0
    assert rows[2]["rollout/restart_groups"] == 4.0  # half of the 8 groups
    assert {"loss/first/tis_weight_mean", "loss/second/tis_weight_mean"} <= set(rows[2])


def test_roster_restarts_keep_the_seats_of_the_lost_game(tmp_path):
    over = [*TINY, "rollout.group_size=2", "rollout.restarts={share: 0.5}"]
    data = {**TWO_ROLES, "rotate": True}
    run = setup_roster(validate_roster(data), build_config(overrides=over), tmp_path)
    plan, _ = make_plan(run, 1)
    observe(run, run.source.play(plan, run.policies))
    buffer = run.plan_states["restarts"].buffer
    assert buffer, "some learner lost a game of the first iteration"
    plan, _ = make_plan(run, 2)
    restarted = [i for i, p in enumerate(plan.prefixes) if p]
    assert len(restarted) == 4  # half of 4 groups, 2 copies each
    sources = {(st.seed, st.prefix): st.seats for st in buffer}
    for i in restarted:
        assert plan.seatings[i] == sources[(plan.seeds[i], plan.prefixes[i])]
