"""coplay sft: the masked loss, full and LoRA fine-tuning, the run directory, the round
trip into ``coplay train model.path=...``, data that does not fit the checkpoint's
answer format or length refused, and the ``optim`` settings it applies."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from coplay.cli import main
from coplay.models.loading import load_policy
from coplay.sft.config import SftSettings, build_sft_config
from coplay.sft.data import read_conversations
from coplay.sft.tokens import encode, ensure_chat_template
from coplay.sft.trainer import base_policy, fine_tune, masked_nll

TINY = ["model.tiny.hidden_size=32", "model.tiny.intermediate_size=64"]
LINES = [
    {
        "messages": [
            {"role": "user", "content": f"Your card: {card}. Your legal actions: [Pass] [Bet]"},
            {"role": "assistant", "content": f"<think>I hold {card}.</think> {act}"},
        ]
    }
    for card, act in (("K", "[Bet]"), ("J", "[Pass]"), ("Q", "[Pass]"))
]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("sft") / "d.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in LINES))
    return path


@pytest.fixture(scope="module")
def setup(data):
    cfg = build_sft_config(preset=None, file=None, overrides=TINY)
    convs = read_conversations(data)
    policy = base_policy(cfg.run, convs)
    ensure_chat_template(policy.tokenizer)
    return policy, [encode(c, policy.tokenizer) for c in convs]


def test_masked_nll_ignores_padding_and_untrained_tokens(setup):
    policy, examples = setup
    model, pad = policy.model, policy.tokenizer.pad_token_id
    with torch.no_grad():
        together = masked_nll(model, examples, pad)
        alone = sum(masked_nll(model, [ex], pad) for ex in examples)
        # Reference: a plain forward per example, summing the assistant tokens' NLL.
        ref = 0.0
        for ex in examples:
            ids = torch.tensor([ex.ids])
            logp = torch.log_softmax(model(ids).logits[0, :-1], -1)
            for t in range(1, len(ex.ids)):
                if ex.loss_mask[t]:
                    ref -= float(logp[t - 1, ex.ids[t]])
    assert float(together) == pytest.approx(float(alone), rel=1e-5)
    assert float(together) == pytest.approx(ref, rel=1e-5)


def test_full_fine_tuning_lowers_the_assistant_loss(setup):
    import copy

    policy, examples = setup
    model = copy.deepcopy(policy.model)
    rows = []
    settings = SftSettings(epochs=30, batch_size=3, lr=3e-3)
    steps = fine_tune(model, examples, settings, pad_id=0, seed=0, log=lambda s, m: rows.append(m))
    assert steps == 30 and len(rows) == 30
    assert rows[-1]["sft/loss"] < 0.5 * rows[0]["sft/loss"]
    assert rows[0]["sft/tokens"] == sum(ex.trained_tokens for ex in examples)


def _tuned(model, examples, **settings):
    """A copy of ``model`` after two fine-tuning steps, and the steps' metric rows."""
    import copy

    model, rows = copy.deepcopy(model), []
    opts = SftSettings(epochs=2, batch_size=3, lr=3e-3, **settings)
    fine_tune(model, examples, opts, pad_id=0, seed=0, log=lambda s, m: rows.append(m))
    return model, rows


def test_passes_within_a_token_budget_add_up_to_one_pass(setup, monkeypatch):
    from coplay.sft import trainer

    policy, examples = setup
    passes = []
    real = trainer.masked_nll
    monkeypatch.setattr(
        trainer, "masked_nll", lambda m, b, p: passes.append(len(b)) or real(m, b, p)
    )
    whole, rows = _tuned(policy.model, examples)
    assert passes == [3, 3]  # the default budget holds the three conversations
    passes.clear()
    parts, part_rows = _tuned(policy.model, examples, micro_batch_tokens=1)
    assert passes == [1] * 6  # each conversation alone
    for (name, a), b in zip(whole.named_parameters(), parts.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), name
    for r, p in zip(rows, part_rows, strict=True):
        assert p["sft/loss"] == pytest.approx(r["sft/loss"], rel=1e-5)
        assert p["sft/grad_norm"] == pytest.approx(r["sft/grad_norm"], rel=1e-4)


def test_a_pass_counts_the_logits_it_keeps_from_its_earliest_answer(setup):
    from coplay.sft.tokens import Example
    from coplay.sft.trainer import _passes
    from coplay.train import micro

    policy, _ = setup
    w = micro.logit_tokens(policy.model.config)
    early = Example(tuple(range(3, 23)), (False,) * 2 + (True,) * 18, 1)
    late = Example(tuple(range(3, 23)), (False,) * 18 + (True,) * 2, 2)
    # Together they keep 19 positions of logits each (from the early answer on).
    fits = 2 * (20 + 19 * w)
    assert _passes(policy.model, [early, late], SftSettings(micro_batch_tokens=fits)) == [
        [early, late]
    ]
    apart = SftSettings(micro_batch_tokens=fits - 1)
    assert _passes(policy.model, [early, late], apart) == [[early], [late]]
    assert _passes(policy.model, [late, early], apart) == [[late], [early]]


def test_vocabulary_gradients_added_in_place_train_the_same_weights(setup, monkeypatch):
    from coplay.train import vocab_grads

    policy, examples = setup
    adds = []
    real = vocab_grads._add_to_grad
    monkeypatch.setattr(vocab_grads, "_add_to_grad", lambda *a: adds.append(1) or real(*a))
    copies, _ = _tuned(policy.model, examples, micro_batch_tokens=1)
    assert not adds  # a tiny model's matrices are small: autograd's own way
    monkeypatch.setattr(vocab_grads, "worth_it", lambda model: True)
    in_place, _ = _tuned(policy.model, examples, micro_batch_tokens=1)
    assert adds
    for (name, a), b in zip(copies.named_parameters(), in_place.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), name


def test_a_batch_without_trained_tokens_takes_a_zero_step(setup):
    from dataclasses import replace

    policy, examples = setup
    silent = [replace(ex, loss_mask=(False,) * len(ex.ids)) for ex in examples]
    model, rows = _tuned(policy.model, silent)
    assert [r["sft/loss"] for r in rows] == [0.0, 0.0]
    assert [r["sft/tokens"] for r in rows] == [0.0, 0.0]
    for a, b in zip(model.parameters(), policy.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_lora_trains_the_adapter_only(setup):
    import copy

    from coplay.models.lora import LoraSettings
    from coplay.sft.trainer import _wrap_lora

    policy, examples = setup
    clone = copy.copy(policy)
    clone.model = copy.deepcopy(policy.model)
    before = {k: v.clone() for k, v in clone.model.state_dict().items()}
    peft = _wrap_lora(clone, LoraSettings(rank=4))
    fine_tune(peft, examples, SftSettings(epochs=3, lr=1e-2), pad_id=0, seed=0, log=lambda *a: 0)
    # peft renames a wrapped linear's weight to ``<name>.base_layer.weight``.
    base = {
        k.replace(".base_layer.", "."): v
        for k, v in peft.get_base_model().state_dict().items()
        if "lora_" not in k
    }
    assert base.keys() == before.keys()
    assert all(torch.equal(base[k], v) for k, v in before.items())
    merged = peft.merge_and_unload().state_dict()
    assert not any("lora" in k for k in merged)
    assert not torch.equal(
        merged["model.layers.0.self_attn.q_proj.weight"],
        before["model.layers.0.self_attn.q_proj.weight"],
    )


def test_cli_sft_run_directory_and_train_round_trip(data, tmp_path):
    out = tmp_path / "sft"
    args = [
        "sft",
        "--quiet",
        "--data",
        str(data),
        "--out",
        str(out),
        *TINY,
        "sft.epochs=2",
        "sft.batch_size=2",
    ]
    assert main(args) == 0
    # a fine-tuned model writes: text mode by default, the tiny tokenizer's own template
    summary = json.loads((out / "summary.json").read_text())
    assert summary["fallback_chat_template"] is False
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == [1, 2, 3, 4]
    assert all(r["sft/loss"] > 0 for r in rows)
    assert (out / "config.yaml").is_file() and (out / "sft.yaml").is_file()
    final = out / "checkpoints" / "final"
    AutoModelForCausalLM.from_pretrained(final)  # a plain HF folder
    tuned = load_policy(final)
    assert tuned.mode == "text" and tuned.tokenizer.chat_template  # the one it was tuned on
    rl = tmp_path / "rl"
    assert (
        main(
            [
                "train",
                "--quiet",
                "--out",
                str(rl),
                f"model.path={final}",
                "model.mode=text",
                "train.iterations=1",
                "train.eval_every=1",
                "train.eval_episodes=4",
                "rollout.games_per_iter=4",
                "train.exact=off",
                "train.exact_matches=off",
            ]
        )
        == 0
    )
    assert (rl / "checkpoints" / "final" / "config.json").is_file()


def test_cli_eval_of_a_text_checkpoint_is_sampled(data, tmp_path, capsys):
    out = tmp_path / "sft"
    args = ["sft", "--quiet", "--data", str(data), "--out", str(out), *TINY, "model.mode=text"]
    assert main([*args, "sft.epochs=1"]) == 0
    capsys.readouterr()
    assert main(["eval", str(out), "--episodes", "4", "--samples", "4", "--exact"]) == 0
    shown = capsys.readouterr().out
    assert "exploitability (sampled, K=4)" in shown and "exact loss seat0 (sampled, K=4)" in shown
    assert "(exact)" not in shown


def test_cli_sft_lora_writes_a_merged_checkpoint(data, tmp_path):
    out = tmp_path / "lora"
    args = [
        "sft",
        "--quiet",
        "--data",
        str(data),
        "--out",
        str(out),
        *TINY,
        "sft.epochs=1",
        "sft.lora.rank=4",
    ]
    assert main(args) == 0
    state = AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "final").state_dict()
    assert not any("lora" in k for k in state)


def test_cli_sft_refuses_an_existing_run_and_bad_input(data, tmp_path, capsys):
    out = tmp_path / "run"
    base = ["sft", "--quiet", "--data", str(data), "--out", str(out), *TINY, "sft.epochs=1"]
    assert main(base) == 0
    capsys.readouterr()
    assert main(base) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already holds a run" in err and "--resume" not in err
    assert main([*base, "--force"]) == 0
    assert list(tmp_path.glob("run.old-*"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(LINES[0]) + '\n{"messages": [{"role": "user", "content": "x"}]}\n')
    assert main(["sft", "--quiet", "--data", str(bad), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert err == f"coplay sft: error: {bad}:2: no assistant message (nothing to learn from)\n"
    assert main([*base, "--force", "sft.epoch=2"]) == 2
    assert "sft.epoch: unknown key" in capsys.readouterr().err


def test_max_tokens_past_a_learned_position_table_is_refused_before_the_run(
    setup, tmp_path, capsys
):
    from transformers import GPT2Config, GPT2LMHeadModel

    # GPT-2's positions are a learned table: past its 128 a conversation was an
    # IndexError in torch, after config.yaml, sft.yaml and metrics.jsonl were written.
    policy, _ = setup
    gpt2 = tmp_path / "gpt2"
    tok = policy.tokenizer
    config = GPT2Config(
        vocab_size=len(tok),
        n_positions=128,
        n_embd=32,
        n_layer=1,
        n_head=2,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    GPT2LMHeadModel(config).save_pretrained(gpt2)
    tok.save_pretrained(gpt2)
    long = {
        "messages": [
            {"role": "user", "content": " ".join(f"card{i}" for i in range(200))},
            {"role": "assistant", "content": "<think>Long.</think> [Bet]"},
        ]
    }
    data = tmp_path / "long.jsonl"
    data.write_text("".join(json.dumps(x) + "\n" for x in (LINES[0], long)))
    out = tmp_path / "run"
    base = ["sft", "--quiet", "--data", str(data), "--out", str(out), f"model.path={gpt2}"]
    capsys.readouterr()
    assert main([*base, "sft.max_tokens=100000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sft.max_tokens=100000 is more than the model's 128" in err
    assert not any(out.glob("*"))  # nothing written
    assert main(base) == 2  # the default limit: the long line is named
    err = capsys.readouterr().err
    assert err.startswith(f"coplay sft: error: {data}:2: the conversation is ")
    assert "longer than 128" in err and not any(out.glob("*"))


def test_max_tokens_past_rotary_positions_is_allowed(setup):
    from coplay.sft.trainer import token_limit

    # Rotary positions (the tiny Llama's) run on past max_position_embeddings, only worse.
    policy, _ = setup
    assert token_limit(SftSettings(), policy.model) == policy.model.config.max_position_embeddings
    assert token_limit(SftSettings(max_tokens=100000), policy.model) == 100000


def _sft(data, out, *overrides):
    return main(["sft", "--quiet", "--data", str(data), "--out", str(out), *TINY, *overrides])


def _write(path, answers, system=None):
    """A dataset of Kuhn turns answered with ``answers``, each opened by ``system``."""
    head = [{"role": "system", "content": system}] if system is not None else []
    lines = [
        {
            "messages": [
                *head,
                {"role": "user", "content": "Your card: K. Your legal actions: [Pass] [Bet]"},
                {"role": "assistant", "content": a},
            ]
        }
        for a in answers
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return path


def test_data_recorded_in_another_answer_format_is_refused_before_the_run(tmp_path, capsys):
    from coplay.policies.answer import ANSWER_FORMATS

    # What coplay demos writes: the format's instruction as the system message. Trained
    # into a checkpoint that records 'action', every such answer was invalid in play.
    think = ANSWER_FORMATS["think"]
    data = _write(tmp_path / "d.jsonl", ["<think>K.</think> [Bet]"], system=think.instruction)
    out = tmp_path / "run"
    capsys.readouterr()
    assert _sft(data, out, "model.text.answer=action", "sft.epochs=1") == 2
    err = capsys.readouterr().err
    assert err == (
        f"coplay sft: error: {data}:1: the data's answers are in the 'think' format (its "
        "system message is that format's instruction) but model.text.answer is 'action', "
        "the format the checkpoint plays in; pass model.text.answer=think\n"
    )
    assert not out.exists()
    # The same instruction: action and free share it.
    action = _write(tmp_path / "a.jsonl", ["[Bet]"], ANSWER_FORMATS["action"].instruction)
    assert _sft(action, tmp_path / "free", "model.text.answer=free", "sft.epochs=1") == 0
    # A choice-mode checkpoint scores the legal actions: it writes no answer to misread.
    assert _sft(data, tmp_path / "choice", "model.text.answer=action", "model.mode=choice") == 0


@pytest.mark.parametrize(
    ("answers", "answer", "inferred"),
    [
        (["<think>K.</think> [Bet]", "<think>J.</think> [Pass]"], "action", "think"),
        (["[Bet]", "[Pass]"], "think", "action"),
        (["<think>K.</think> \\boxed{Bet}"], "think", "think-boxed"),
        (["[Bet]", "<think>J.</think> [Pass]"], "action", "bracket"),
    ],
)
def test_answers_the_checkpoint_format_cannot_read_are_refused(
    tmp_path, capsys, answers, answer, inferred
):
    # No system message says the format: the answers are read as play reads them, and
    # the one line names the registered format that reads them all.
    data = _write(tmp_path / "d.jsonl", answers)
    capsys.readouterr()
    assert _sft(data, tmp_path / "run", f"model.text.answer={answer}") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"the data's answers are in the {inferred!r} format" in err
    assert f"model.text.answer is {answer!r}" in err and f"model.text.answer={inferred}\n" in err
    assert _sft(data, tmp_path / "ok", f"model.text.answer={inferred}", "sft.epochs=1") == 0


def test_answers_no_format_reads_are_named_by_line(tmp_path, capsys):
    # Bracketed and boxed: no format reads both (free reads brackets only).
    data = _write(tmp_path / "d.jsonl", ["<think>K.</think> [Bet]", "\\boxed{Pass}"])
    capsys.readouterr()
    assert _sft(data, tmp_path / "run", "model.text.answer=think") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"coplay sft: error: {data}:2: model.text.answer 'think'")
    assert "no registered format reads every answer" in err and err.count("\n") == 1


def test_answers_longer_than_max_new_tokens_are_refused_before_the_run(data, tmp_path, capsys):
    import re

    out = tmp_path / "run"
    capsys.readouterr()
    assert _sft(data, out, "model.max_new_tokens=2") == 2
    err = capsys.readouterr().err
    found = re.fullmatch(
        rf"coplay sft: error: {data}:(\d): the longest answer is (\d+) tokens but "
        r"model.max_new_tokens is 2, where play cuts an answer off; "
        r"pass model.max_new_tokens=(\d+) or more\n",
        err,
    )
    assert found and found[2] == found[3] and not out.exists()
    longest = int(found[2])
    assert _sft(data, out, f"model.max_new_tokens={longest - 1}") == 2
    assert _sft(data, out, f"model.max_new_tokens={longest}", "sft.epochs=1") == 0


def _layer_calls(model, examples, **optim):
    """Two steps of fine-tuning a copy of ``model`` under ``optim``: the copy, the
    metric rows, and how often its first block's MLP ran."""
    import copy

    from coplay.train.config import OptimConfig

    calls = []
    model, rows = copy.deepcopy(model), []
    # Counted by its forward: recomputation calls it again, but not its module hooks.
    mlp = model.model.layers[0].mlp
    real = mlp.forward
    mlp.forward = lambda *a, **k: calls.append(1) or real(*a, **k)
    settings = SftSettings(epochs=2, batch_size=3, lr=3e-3)
    fine_tune(
        model,
        examples,
        settings,
        pad_id=0,
        seed=0,
        log=lambda s, m: rows.append(m),
        optim=OptimConfig(**optim),
    )
    return model, rows, len(calls)


def test_activation_checkpointing_recomputes_each_block_and_trains_the_same(setup):
    policy, examples = setup
    plain, rows, calls = _layer_calls(policy.model, examples)
    saved, saved_rows, recomputed = _layer_calls(
        policy.model, examples, activation_checkpointing=True
    )
    assert calls == 2 and recomputed == 4  # each block runs again in the backward pass
    for (name, a), b in zip(plain.named_parameters(), saved.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), name
    for r, s in zip(rows, saved_rows, strict=True):
        assert s["sft/loss"] == pytest.approx(r["sft/loss"], rel=1e-5)


def test_optim_fused_and_vocab_grads_in_place_apply(setup, monkeypatch):
    from coplay.sft.trainer import sft_optimizer
    from coplay.train import vocab_grads
    from coplay.train.config import OptimConfig

    policy, examples = setup
    params = list(policy.model.parameters())
    assert sft_optimizer(params, SftSettings(), OptimConfig(fused=True)).defaults["fused"]
    plain = sft_optimizer(params, SftSettings(lr=0.5), OptimConfig())  # a tiny model's default
    assert not plain.defaults["fused"] and plain.defaults["foreach"]
    assert plain.defaults["lr"] == 0.5
    adds = []
    real = vocab_grads._add_to_grad
    monkeypatch.setattr(vocab_grads, "_add_to_grad", lambda *a: adds.append(1) or real(*a))
    _layer_calls(policy.model, examples, vocab_grads_in_place=True)
    assert adds
    adds.clear()
    monkeypatch.setattr(vocab_grads, "worth_it", lambda model: True)
    _layer_calls(policy.model, examples, vocab_grads_in_place=False)
    assert not adds


def test_cli_sft_applies_activation_checkpointing_and_records_what_it_used(data, tmp_path):
    import yaml

    out = tmp_path / "run"
    assert (
        _sft(data, out, "sft.epochs=1", "sft.lora.rank=4", "optim.activation_checkpointing=true")
        == 0
    )
    optim = yaml.safe_load((out / "config.yaml").read_text())["optim"]
    # Only what sft applied: the learning rate it trained at is sft.yaml's.
    assert optim == {"fused": None, "activation_checkpointing": True, "vocab_grads_in_place": None}
    assert yaml.safe_load((out / "sft.yaml").read_text())["lr"] == SftSettings().lr
