"""Smoke test of the rollout benchmark: every arm, and the game-alone bound."""

import pytest
import torch

from coplay.envs.gameref import GameRef

BENCHMARK = "rollout_throughput"


def test_a_short_run_reports_every_arm_and_a_bound_below_one(bench):
    lines = []
    out = bench.main(
        ["--game", "kuhn_poker", "--games", "8", "--loop-games", "0", "--repeats", "1"],
        report=lines.append,
    )
    assert set(out["median_decisions_per_s"]) == {"engine", "raw", "game", "records"}
    rates = out["median_decisions_per_s"]
    bound = out["ratios"]["bound engine/raw"]
    assert bound == pytest.approx(rates["game"] / (rates["game"] + rates["raw"]))
    assert 0.0 < bound < 1.0
    # The records are one more cost per decision: a tighter bound.
    tighter = out["ratios"]["bound with records"]
    per_decision = 1 / rates["raw"] + 1 / rates["game"] + 1 / rates["records"]
    assert tighter == pytest.approx((1 / rates["raw"]) / per_decision)
    assert 0.0 < tighter < bound
    assert any(line.startswith("bound engine/raw") for line in lines)
    assert any(line.startswith("bound with records") for line in lines)


def test_the_records_arm_builds_what_the_engine_returned(bench):
    game = GameRef("kuhn_poker")
    policy = bench.build_policy(bench.ModelConfig(), corpus=["Action: [Pass] [Bet]"] * 4, seed=0)
    _, batches, episodes = bench.engine_run(policy, game, 16, seed=0)
    secs, decisions = bench.records_run(episodes)
    assert secs > 0 and decisions == sum(map(len, batches)) == sum(
        len(t.turns) for e in episodes for t in e.trajectories
    )


def test_the_game_arm_plays_every_game_to_its_end(bench):
    secs, decisions = bench.game_run(GameRef("kuhn_poker"), range(50))
    assert secs > 0 and 100 <= decisions <= 150  # Kuhn: 2 or 3 decisions a game
    _, decisions = bench.game_run(GameRef("tic_tac_toe"), range(5))
    assert 5 * 5 <= decisions <= 5 * 9


def test_the_engines_own_time_is_its_time_beyond_the_raw_arms(bench):
    out = bench.main(
        ["--game", "kuhn_poker", "--games", "8", "--loop-games", "0", "--repeats", "3"],
        report=lambda _: None,
    )
    engine, raw = out["decisions_per_s"]["engine"], out["decisions_per_s"]["raw"]
    own = sorted(1e6 / e - 1e6 / w for e, w in zip(engine, raw, strict=True))
    assert out["own_us_per_decision"] == pytest.approx(own[1])


def test_model_overrides_shape_the_model_and_bad_ones_get_one_line(bench, capsys):
    cfg = bench.model_config(["model.tiny.hidden_size=128", "model.tiny.num_layers=3"])
    assert (cfg.tiny.hidden_size, cfg.tiny.num_layers) == (128, 3)
    assert bench.model_config([]) == bench.ModelConfig()
    for bad, says in [
        ("train.iterations=3", "only model.* keys"),
        ("model.tiny.hidden_size=-1", "model.tiny.hidden_size"),
        ("model.tiny.size=3", "model.tiny.size"),
    ]:
        with pytest.raises(SystemExit):
            bench.main(["--repeats", "1", bad])
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert says in err and "Traceback" not in err
    with pytest.raises(SystemExit):
        bench.main(["--game", "no_such_game"])
    assert "unknown game 'no_such_game'" in capsys.readouterr().err


def test_each_paired_figure_comes_with_its_lowest_and_highest_repeat(bench):
    lines = []
    out = bench.main(
        ["--game", "kuhn_poker", "--games", "8", "--loop-games", "0", "--repeats", "3"],
        report=lines.append,
    )
    engine, raw = out["decisions_per_s"]["engine"], out["decisions_per_s"]["raw"]
    ratios = [e / w for e, w in zip(engine, raw, strict=True)]
    assert out["spread"]["paired engine/raw"] == [min(ratios), max(ratios)]
    lo, hi = out["spread"]["own us/decision"]
    assert lo <= out["own_us_per_decision"] <= hi
    assert "paired engine/raw" in out["spread"] and "bound engine/raw" not in out["spread"]
    assert any(line.startswith("paired engine/raw") and "(repeats" in line for line in lines)


def test_loop_arms_on_a_gpu_model_are_one_error_line(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--repeats", "1", "model.device=cuda"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--loop-games 0" in err and "Traceback" not in err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_the_raw_arms_tensors_moved_to_a_gpu_give_the_cpus_tables(bench):
    cfg = bench.ModelConfig()
    policy = bench.build_policy(cfg, corpus=["Action: [Pass] [Bet]"] * 4, seed=0)
    _, batches, _ = bench.engine_run(policy, GameRef("tic_tac_toe"), 8, seed=0)
    cpu = [bench.raw_group(policy.model, g, 1.0) for g in bench.build_groups(policy, batches[1])]
    policy.model.to("cuda")
    groups = bench.build_groups(policy, batches[1])
    assert all(g.ids.is_cuda and g.table_index[0].is_cuda for g in groups)
    gpu = [bench.raw_group(policy.model, g, 1.0) for g in groups]
    for a, b in zip(cpu, gpu, strict=True):
        torch.testing.assert_close(b.cpu(), a, rtol=1e-4, atol=1e-5)


def test_the_waves_arm_plays_the_engines_games_in_parts(bench, capsys):
    game = GameRef("kuhn_poker")
    policy = bench.build_policy(bench.ModelConfig(), corpus=["Action: [Pass] [Bet]"] * 4, seed=0)
    _, whole, played = bench.engine_run(policy, game, 16, seed=0)
    _, parts, in_parts = bench.engine_run(policy, game, 16, seed=0, waves=2)
    assert [e.returns for e in in_parts] == [e.returns for e in played]
    assert len(parts) == 2 * len(whole) and sum(map(len, parts)) == sum(map(len, whole))
    out = bench.main(
        ["--games", "8", "--loop-games", "0", "--repeats", "2", "--waves", "2"],
        report=lambda _: None,
    )
    waves, raw = out["decisions_per_s"]["waves"], out["decisions_per_s"]["raw"]
    assert out["ratios"]["paired waves/raw"] == pytest.approx(
        sorted(w / r for w, r in zip(waves, raw, strict=True))[0] / 2
        + sorted(w / r for w, r in zip(waves, raw, strict=True))[1] / 2
    )
    assert "waves/engine" in out["ratios"] and out["waves"] == 2
    with pytest.raises(SystemExit):
        bench.main(["--waves", "0"])
    assert "--waves 0: at least 1" in capsys.readouterr().err
