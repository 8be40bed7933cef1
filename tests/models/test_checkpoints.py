"""Which saved policy a path means: checkpoints, runs, roster roles, LoRA adapters."""

import json

import pytest

from coplay.envs.registry import make_env
from coplay.models.checkpoints import find_policy
from coplay.models.loading import PlayedGame, save_policy
from coplay.models.lora import LoraSettings, attach_roles, save_roles
from coplay.models.tiny import TinyModelConfig, build_tiny_model
from coplay.models.tokenizer import train_tokenizer
from coplay.policies.lm import LMPolicy

KUHN3 = PlayedGame("kuhn_poker", {"players": 3})


def _policy(seed=0):
    env = make_env("kuhn_poker")
    tok = train_tokenizer([env.observe(0).text, "Action: [Pass] [Bet]"] * 20, vocab_size=320)
    cfg = TinyModelConfig(vocab_size=320, hidden_size=32, intermediate_size=64)
    return LMPolicy(build_tiny_model(cfg, vocab_size=len(tok), seed=seed), tok, seed=seed)


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("lora")
    views = attach_roles(_policy(), ["first", "second"], LoraSettings(rank=2), seed=0)
    save_roles(views, run / "checkpoints" / "final", game=KUHN3)
    return run


def test_a_checkpoint_records_its_game_and_prompt_format(tmp_path):
    save_policy(_policy(), tmp_path / "ckpt", game=KUHN3)
    meta = json.loads((tmp_path / "ckpt" / "coplay_policy.json").read_text())
    assert (meta["game"], meta["game_params"]) == ("kuhn_poker", {"players": 3})
    assert meta["prompt_format"] == "plain"  # the tiny tokenizer has no chat template
    assert find_policy(tmp_path / "ckpt").game() == KUHN3


def test_an_older_checkpoint_takes_the_game_of_its_run(tmp_path):
    save_policy(_policy(), tmp_path / "run" / "checkpoints" / "final")
    (tmp_path / "run" / "config.yaml").write_text("game: {name: leduc_poker}\n")
    assert find_policy(tmp_path / "run").game() == PlayedGame("leduc_poker", {})
    save_policy(_policy(), tmp_path / "alone")
    assert find_policy(tmp_path / "alone").game() is None


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ("game: {name: [kuhn\n", "config.yaml is not valid YAML"),
        ("- game\n", "config.yaml is not a YAML mapping"),
        ("game: kuhn_poker\n", "config.yaml: game must be a mapping"),
        ("game: {name: kuhn_poker, params: 3}\n", "config.yaml: game must be a mapping"),
    ],
)
def test_a_run_config_that_cannot_name_the_game_is_a_one_line_error(tmp_path, config, match):
    save_policy(_policy(), tmp_path / "run" / "checkpoints" / "final")
    (tmp_path / "run" / "config.yaml").write_text(config)
    with pytest.raises(ValueError, match=match) as err:
        find_policy(tmp_path / "run").game()
    assert "\n" not in str(err.value)


def test_a_roster_run_needs_a_role(tmp_path):
    for name in ("first", "second"):
        save_policy(_policy(), tmp_path / "checkpoints" / "final" / name, game=KUHN3)
    with pytest.raises(ValueError, match="roster run with policies first, second: pick one"):
        find_policy(tmp_path)
    second = find_policy(tmp_path, "second")
    assert second.folder.name == "second" and not second.adapter
    assert second.load().mode == "choice"
    with pytest.raises(ValueError, match="has no policy 'third'; its policies: first, second"):
        find_policy(tmp_path, "third")


def test_a_runs_checkpoints_folder_points_to_the_run(tmp_path):
    # Its final and iter_N checkpoints were taken for a roster run's roles.
    for name in ("final", "iter_000001"):
        save_policy(_policy(), tmp_path / "run" / "checkpoints" / name)
    with pytest.raises(ValueError) as err:
        find_policy(tmp_path / "run" / "checkpoints")
    assert str(err.value).startswith(
        f"{tmp_path / 'run' / 'checkpoints'} is the checkpoints folder of the run "
        f"{tmp_path / 'run'}: pass the run"
    )


def test_a_roster_run_before_its_end_says_it_has_saved_no_policy_yet(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "roster.yaml").write_text("roster: {}\n")
    for role in (None, "first"):  # said "not a roster run", then "neither a checkpoint"
        with pytest.raises(FileNotFoundError, match="roster run that has not saved its"):
            find_policy(tmp_path, role)


def test_a_lora_role_loads_its_adapter_on_the_base(lora_run):
    saved = find_policy(lora_run, "second")
    assert saved.adapter and saved.game() == KUHN3
    policy = saved.load()
    assert policy.adapter == "second"
    assert find_policy(saved.folder).adapter  # the adapter folder alone says the same


def test_the_untrained_lora_base_is_refused_unless_named(lora_run):
    base = lora_run / "checkpoints" / "final" / "base"
    with pytest.raises(ValueError, match="untrained base of a LoRA roster run"):
        find_policy(base)
    assert find_policy(lora_run, "base").folder == base
    assert find_policy(base, "base").folder == base
    assert find_policy(base, "first").adapter  # a role named beside the base


def test_a_single_policy_run_refuses_a_role_and_a_missing_path_is_named(tmp_path):
    save_policy(_policy(), tmp_path / "run" / "checkpoints" / "final")
    with pytest.raises(ValueError, match="not a roster run"):
        find_policy(tmp_path / "run", "first")
    with pytest.raises(FileNotFoundError, match="nowhere does not exist"):
        find_policy(tmp_path / "nowhere")


def test_a_roster_learner_named_base_is_one_of_its_policies(tmp_path):
    # Only a LoRA run's base is no policy: a learner may be named so in another roster.
    # It was left out of the list, and a run with no other learner was "neither a
    # checkpoint nor a run directory with checkpoints".
    (tmp_path / "roster.yaml").write_text("roster: {}\n")
    final = tmp_path / "checkpoints" / "final"
    save_policy(_policy(), final / "base", game=KUHN3)
    with pytest.raises(ValueError, match="roster run with policies base: pick one"):
        find_policy(tmp_path)
    save_policy(_policy(), final / "other", game=KUHN3)
    with pytest.raises(ValueError, match="roster run with policies base, other: pick one"):
        find_policy(tmp_path)
    assert find_policy(tmp_path, "base").folder == final / "base"
    assert find_policy(final / "base").folder == final / "base"  # no LoRA base to refuse
