"""Smoke test of the Qwen2 end-to-end benchmark: a tiny Qwen2 through chat-context training."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("text_qwen2", ROOT / "benchmarks/text_qwen2.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_chatml_tokenizer_renders_qwen_chat_format():
    tok = _bench().chatml_tokenizer()
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert (
        text
        == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tok.eos_token == "<|im_end|>" and tok.bos_token is None
    # Role markers and reasoning tags are single tokens.
    for piece in ("<|im_start|>", "<|im_end|>", "<think>", "</think>"):
        assert len(tok(piece, add_special_tokens=False)["input_ids"]) == 1


def test_quick_run_checks_template_exactness_and_measures(tmp_path, capsys):
    out = tmp_path / "r.json"
    r = _bench().main(["--quick", "--json", str(out)])
    assert r["template_used"] is True
    assert r["think_instruction"] is True
    assert r["later_turns"] > 0 and r["token_exact"] is True
    assert r["token_exact_turns"] == r["later_turns"]
    assert len(r["tokens_per_s"]) == 2 and all(x > 0 for x in r["tokens_per_s"])
    assert all(0 < n <= 32 for n in r["response_len"])
    assert r["peak_rss_mib"] > 100
    assert json.loads(out.read_text())["token_exact"] is True
    assert "token exact: True" in capsys.readouterr().out
