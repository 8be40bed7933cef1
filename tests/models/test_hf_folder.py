"""Checkpoint folders: found from a run directory, every bad file one error line."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from coplay.cli import main
from coplay.models.build import ModelConfig, build_policy
from coplay.models.hf_folder import CheckpointError, check_checkpoint, resolve_checkpoint
from coplay.models.loading import load_policy, save_policy
from coplay.models.tokenizer import train_tokenizer
from coplay.types import Observation
from tests.models.tiny_policies import CORPUS, tiny_policy


def test_run_directory_resolves_to_its_final_checkpoint(tmp_path):
    save_policy(tiny_policy(), tmp_path / "run" / "checkpoints" / "iter_000010")
    assert resolve_checkpoint(tmp_path / "run").name == "iter_000010"
    save_policy(tiny_policy(), tmp_path / "run" / "checkpoints" / "final")
    assert resolve_checkpoint(tmp_path / "run").name == "final"


def test_a_run_without_final_resolves_to_its_latest_whole_checkpoint(tmp_path):
    ckpts = tmp_path / "run" / "checkpoints"
    # A half-written, a replaced and an unrelated folder sort after the latest name.
    for name in ("iter_999999", "iter_1000000", "iter_1000001.tmp", "iter_999999.old", "z"):
        (ckpts / name).mkdir(parents=True)
        (ckpts / name / "config.json").write_text("{}")
    assert resolve_checkpoint(tmp_path / "run").name == "iter_1000000"


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a checkpoint"):
        load_policy(tmp_path)
    with pytest.raises(FileNotFoundError, match="config.json missing"):
        build_policy(ModelConfig(path=str(tmp_path)), corpus=CORPUS, seed=0)


def _weights(folder):
    return folder / "model.safetensors"


def _half(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _edit_config(**changes):
    def edit(folder):
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **changes}))

    return edit


def _edit_meta(**changes):
    def edit(folder):
        meta = json.loads((folder / "coplay_policy.json").read_text())
        (folder / "coplay_policy.json").write_text(json.dumps({**meta, **changes}))

    return edit


def _grow_tokenizer(folder):
    tok = PreTrainedTokenizerFast.from_pretrained(folder)
    tok.add_tokens(["<extra>"], special_tokens=True)  # one id past the embedding
    tok.save_pretrained(folder)


def _drop_weight(folder):
    weights = load_file(_weights(folder))
    save_file({k: v for k, v in weights.items() if k != "model.norm.weight"}, _weights(folder))


def _store_weight_as(dtype):
    def edit(folder):
        weights = load_file(_weights(folder))
        key = "model.embed_tokens.weight"  # trained values: cast, they would lose all but integers
        weights[key] = (weights[key] * 100).to(dtype)
        save_file(weights, _weights(folder))

    return edit


def _template(text):
    return lambda folder: (folder / "chat_template.jinja").write_text(text)


def _edit_generation(**changes):
    def edit(folder):
        config = json.loads((folder / "generation_config.json").read_text())
        (folder / "generation_config.json").write_text(json.dumps({**config, **changes}))

    return edit


BAD_CHECKPOINTS = {
    "empty weights": (
        lambda d: _weights(d).write_bytes(b""),
        "{d}/model.safetensors is not a valid safetensors file (truncated or corrupt): ",
    ),
    "truncated weights": (
        lambda d: _half(_weights(d)),
        "{d}/model.safetensors is not a valid safetensors file (truncated or corrupt): ",
    ),
    "garbage weights": (
        lambda d: _weights(d).write_bytes(b"not a tensor file " * 64),
        "{d}/model.safetensors is not a valid safetensors file (truncated or corrupt): ",
    ),
    "no weights": (
        lambda d: _weights(d).unlink(),
        "{d}/model.safetensors is missing (no model weights)",
    ),
    "weights lacking a tensor": (
        _drop_weight,
        "{d} lacks weights its config.json needs: model.norm.weight",
    ),
    "no config.json": (
        lambda d: (d / "config.json").unlink(),
        "{d}/config.json is missing (the model's config)",
    ),
    "config.json not JSON": (
        lambda d: (d / "config.json").write_text("{hidden_size: 32"),
        "{d}/config.json is not valid JSON: Expecting property name enclosed in double quotes",
    ),
    "config.json a list": (
        lambda d: (d / "config.json").write_text("[1, 2]"),
        "{d}/config.json is not a model config (a JSON object)",
    ),
    "config.json without model_type": (
        lambda d: (d / "config.json").write_text('{"hidden_size": 32}'),
        "{d}/config.json has no model_type (which architecture it holds)",
    ),
    "unknown model type": (
        _edit_config(model_type="nosuch"),
        "{d}/config.json names model type 'nosuch', which transformers does not know",
    ),
    "config.json of another size": (
        _edit_config(hidden_size=64),
        "{d} holds weights of another size than its config.json says: model.embed_tokens.weight"
        " is [",
    ),
    "no tokenizer": (
        lambda d: [(d / f).unlink() for f in ("tokenizer.json", "tokenizer_config.json")],
        "{d}/tokenizer.json is missing (the tokenizer)",
    ),
    "tokenizer larger than the embedding": (
        _grow_tokenizer,
        "{d}: the tokenizer has token ids up to 287 but the model's embedding has 287 rows",
    ),
    "tokenizer.json not JSON": (
        lambda d: (d / "tokenizer.json").write_text("garbage"),
        "{d}/tokenizer.json is not valid JSON: Expecting value: line 1 column 1 (char 0)",
    ),
    "coplay_policy.json not JSON": (
        lambda d: (d / "coplay_policy.json").write_text("mode: text"),
        "{d}/coplay_policy.json is not valid JSON: Expecting value: line 1 column 1 (char 0)",
    ),
    "coplay_policy.json a list": (
        lambda d: (d / "coplay_policy.json").write_text("[]"),
        "{d}/coplay_policy.json is not a JSON object of policy settings",
    ),
    "config.json of fewer layers": (
        _edit_config(num_hidden_layers=1),
        "{d} holds weights its config.json has no place for: model.layers.1.",
    ),
    "a version that is not a number": (
        _edit_meta(version="v3"),
        "{d}/coplay_policy.json: version: Input should be a valid integer",
    ),
    "a text setting that is not a mapping": (
        _edit_meta(text="free"),
        "{d}/coplay_policy.json: text: Input should be a valid dictionary",
    ),
    "a policy id that is a list": (
        _edit_meta(policy_id=[1]),
        "{d}/coplay_policy.json: policy_id: Input should be a valid string",
    ),
    "a temperature of zero": (
        _edit_meta(temperature=0),
        "{d}/coplay_policy.json: temperature",
    ),
    "a recorded game that is unknown": (
        _edit_meta(game="no_such_game"),
        "{d}/coplay_policy.json: unknown game 'no_such_game'; known games: ",
    ),
    "recorded game parameters the game refuses": (
        _edit_meta(game="kuhn_poker", game_params={"players": "two"}),
        "{d}/coplay_policy.json: bad parameters for game 'kuhn_poker': ",
    ),
    "no such folder": (
        shutil.rmtree,
        "{d} does not exist (expected a run directory or checkpoint)",
    ),
    "weights stored as integers": (
        _store_weight_as(torch.int32),
        "{d}/model.safetensors holds model.embed_tokens.weight as I32, not as floating "
        "point numbers: the model's weight is float32",
    ),
    "weights stored as booleans": (
        _store_weight_as(torch.bool),
        "{d}/model.safetensors holds model.embed_tokens.weight as BOOL, not as floating ",
    ),
    "a chat template that does not parse": (
        _template("{% for m in messages %}{{ m['content'] }"),
        "{d}/chat_template.jinja: the chat template cannot render a prompt: unexpected '}}'",
    ),
    "a chat template that raises": (
        _template("{{ raise_exception('no roles here') }}"),
        "{d}/chat_template.jinja: the chat template cannot render a prompt: no roles here",
    ),
    "generation_config.json not JSON": (
        lambda d: (d / "generation_config.json").write_text("{eos"),
        "{d}/generation_config.json is not valid JSON: ",
    ),
    "generation_config.json a list": (
        lambda d: (d / "generation_config.json").write_text("[2]"),
        "{d}/generation_config.json is not a generation config (a JSON object)",
    ),
    "an end of turn that is not a token id": (
        _edit_generation(eos_token_id=[2, "<eos>"]),
        "{d}/generation_config.json: eos_token_id must be a token id or a list of token ids, "
        "not [2, '<eos>']",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CHECKPOINTS))
def test_eval_of_a_bad_checkpoint_is_one_error_line(checkpoint, tmp_path, capsys, case):
    corrupt, message = BAD_CHECKPOINTS[case]
    folder = tmp_path / "final"
    shutil.copytree(checkpoint, folder)
    corrupt(folder)
    assert main(["eval", str(folder), "--game", "kuhn_poker", "--episodes", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("coplay eval: error: " + message.format(d=folder)), err
    assert len(err.splitlines()) == 1


def test_a_run_directory_where_a_checkpoint_is_expected_names_its_checkpoint(checkpoint, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(checkpoint, run / "checkpoints" / "iter_000002")
    with pytest.raises(FileNotFoundError) as err:
        build_policy(ModelConfig(path=str(run)), corpus=CORPUS, seed=0)
    assert str(err.value) == (
        f"no Hugging Face checkpoint at {run} (config.json missing); {run} is a run "
        f"directory: give its checkpoint, {run / 'checkpoints' / 'iter_000002'}"
    )
    shutil.copytree(checkpoint, run / "checkpoints" / "final" / "learner")  # a roster's
    shutil.rmtree(run / "checkpoints" / "iter_000002")
    with pytest.raises(FileNotFoundError, match="give a checkpoint under .*run/checkpoints$"):
        check_checkpoint(run)


def test_a_bad_checkpoint_in_a_run_directory_names_the_file(checkpoint, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(checkpoint, run / "checkpoints" / "final")
    _half(_weights(run / "checkpoints" / "final"))
    with pytest.raises(CheckpointError, match="checkpoints/final/model.safetensors is not a valid"):
        load_policy(run)


def test_a_good_checkpoint_still_loads_after_the_checks(checkpoint):
    check_checkpoint(checkpoint)
    assert load_policy(checkpoint).model.config.hidden_size == 32


def _qwen2_folder(folder):
    """A Qwen2 model built here with its own tokenizer (no pad token, none of Qwen2's
    special tokens), saved as ``save_pretrained`` writes it."""
    base = train_tokenizer(CORPUS, vocab_size=300, actions=["[Pass]", "[Bet]"])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=base.backend_tokenizer, bos_token="<eos>", eos_token="<eos>"
    )
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        tie_word_embeddings=True,
        max_position_embeddings=128,
    )
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_a_local_qwen2_model_loads_the_tokenizer_it_was_saved_with(tmp_path):
    folder = _qwen2_folder(tmp_path / "qwen2")
    policy = load_policy(folder)
    assert len(policy.tokenizer) == policy.model.config.vocab_size  # no Qwen2 tokens added
    short = Observation("kuhn_poker", 0, "Your card: K.\n", ("[Pass]", "[Bet]"))
    long = Observation("kuhn_poker", 0, "Your card: K. History: Bet Pass\n", ("[Pass]", "[Bet]"))
    assert len(policy.action_probs([short, long])) == 2  # a padded batch
    save_policy(policy, tmp_path / "saved")
    assert len(load_policy(tmp_path / "saved").tokenizer) == len(policy.tokenizer)


def test_a_tokenizer_without_special_tokens_loads_and_scores(checkpoint, tmp_path):
    # The vocabulary check took the largest of no special ids: "'int' object is not
    # iterable", a line that names no file, for a folder that loads with transformers.
    folder = tmp_path / "final"
    shutil.copytree(checkpoint, folder)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    for key in ("pad_token", "bos_token", "eos_token"):
        settings.pop(key)
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    policy = load_policy(folder)
    assert policy.tokenizer.all_special_ids == []
    short = Observation("kuhn_poker", 0, "Your card: K.\n", ("[Pass]", "[Bet]"))
    long = Observation("kuhn_poker", 0, "Your card: K. History: Bet Pass\n", ("[Pass]", "[Bet]"))
    probs = policy.action_probs([short, long])  # a padded batch
    assert [sum(p.values()) for p in probs] == pytest.approx([1.0, 1.0])


def test_a_chat_template_without_a_system_role_loads(checkpoint, tmp_path):
    # Gemma's refuses a system message; play folds it into the user's, and so does the check.
    folder = tmp_path / "final"
    shutil.copytree(checkpoint, folder)
    _template(
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system role') }}"
        "{% endif %}{% for m in messages %}{{ m['role'] + ': ' + m['content'] + '\\n' }}"
        "{% endfor %}"
    )(folder)
    assert load_policy(folder).tokenizer.chat_template
