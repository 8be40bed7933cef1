"""``coplay serve``: the vLLM server command for a run, and (marked vllm) a served run
that answers a chat request and plays a full game as a ``remote:`` player."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

from coplay.envs.registry import make_env
from coplay.eval.matches import play_match
from coplay.models.loading import PlayedGame, save_policy
from coplay.models.tiny import TinyModelConfig, build_tiny_model
from coplay.models.tokenizer import train_tokenizer
from coplay.policies.lm import LMPolicy
from coplay.policies.remote import messages, remote_from_spec
from coplay.policies.scripted import RandomPolicy
from coplay.policies.text import TextConfig
from coplay.rollout.invalid import InvalidActionConfig
from coplay.serve import PLAIN_TEMPLATE, plain_template, serve_plan

HEAD_32 = TinyModelConfig(vocab_size=320, hidden_size=64, num_heads=2)
READY_S = 300  # a cold vLLM import and engine start take minutes on a busy 2-core machine


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A run directory whose final checkpoint is a tiny Kuhn model (plain prompts)."""
    env = make_env("kuhn_poker")
    corpus = [env.observe(env.players_to_act()[0]).text, "Action: [Pass] [Bet] [Call] [Fold]"] * 20
    tok = train_tokenizer(corpus, vocab_size=320)
    model = build_tiny_model(HEAD_32, vocab_size=len(tok), seed=0)
    out = tmp_path_factory.mktemp("runs") / "kuhn-tiny"
    policy = LMPolicy(model, tok, temperature=0.9)
    save_policy(policy, out / "checkpoints" / "final", game=PlayedGame("kuhn_poker"))
    return out


def test_the_command_serves_the_final_checkpoint_on_the_local_machine(run):
    plan = serve_plan(run, host="127.0.0.1", port=8123, cuda=False)
    cmd = plan.command
    assert cmd[:5] == [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(run / "checkpoints" / "final"),
    ]
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and cmd[cmd.index("--port") + 1] == "8123"
    sampling = json.loads(cmd[cmd.index("--override-generation-config") + 1])
    assert sampling == {"temperature": 0.9, "top_p": 1.0, "top_k": 0, "max_new_tokens": 24}
    assert plan.chat_template == PLAIN_TEMPLATE and "--chat-template" not in cmd  # none its own
    assert (
        "--enforce-eager" in cmd
        and "--enforce-eager" not in serve_plan(run, host="::", port=1, cuda=True).command
    )
    assert plan.remote == "remote:http://127.0.0.1:8123/v1#kuhn-tiny"
    assert serve_plan(run, host="::1", port=9, cuda=True).base_url == "http://[::1]:9/v1"


@pytest.mark.parametrize("mode", ["choice", "text"])
def test_the_served_prompt_is_the_policys_own_token_for_token(mode):
    # The template once added a newline and a space: after "Action: " the model had to
    # write "[", "Bet", "]", tokens it never learned to write there.
    env = make_env("kuhn_poker")
    corpus = [env.observe(0).text, "Action: [Pass] [Bet] Answer: <think>", "Reason"] * 20
    tok = train_tokenizer(corpus, vocab_size=320)
    model = build_tiny_model(HEAD_32, vocab_size=len(tok), seed=0)
    text = TextConfig(answer="bracket")
    policy = LMPolicy(model, tok, mode=mode, text=text)
    meta = {"mode": mode, "text": text.model_dump()}
    for seed in range(4):
        env.reset(seed)
        obs = env.observe(env.players_to_act()[0])
        served = tok.apply_chat_template(
            [{"role": "user", "content": obs.text}],
            chat_template=plain_template(meta),
            add_generation_prompt=True,
            tokenize=False,
        )
        # The server encodes the rendered text as it stands: the template holds the BOS.
        ids = tok(served, add_special_tokens=False)["input_ids"]
        assert tuple(ids) == tuple(policy.prompt_ids(obs))


REFUSES_SYSTEM = (
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
    "supported') }}{% endif %}"
)
"""Put before a template: a system message is refused, as Gemma's template does."""


@pytest.mark.parametrize(
    ("mode", "system_role"), [("choice", True), ("text", True), ("choice", False), ("text", False)]
)
def test_a_checkpoints_own_template_serves_the_policys_own_prompt(tmp_path, mode, system_role):
    # The remote player sends its own system prompt; the policy was trained with the
    # answer format's instruction (text mode) or no system message (choice mode).
    env = make_env("kuhn_poker")
    corpus = [env.observe(0).text, "Action: [Pass] [Bet] Answer: <think>", "Reason"] * 20
    tok = train_tokenizer(corpus, vocab_size=320, text=True)
    if not system_role:
        tok.chat_template = REFUSES_SYSTEM + tok.chat_template
    model = build_tiny_model(HEAD_32, vocab_size=len(tok), seed=0)
    policy = LMPolicy(model, tok, mode=mode, text=TextConfig(answer="think-boxed"))
    run = tmp_path / "run"
    save_policy(policy, run / "checkpoints" / "final", game=PlayedGame("kuhn_poker"))
    plan = serve_plan(run, host="127.0.0.1", port=8000, cuda=True)
    remote = remote_from_spec(plan.remote)
    for seed in range(4):
        env.reset(seed)
        obs = env.observe(env.players_to_act()[0])
        served = tok.apply_chat_template(
            messages(obs, remote.system_prompt),
            chat_template=plan.chat_template,
            add_generation_prompt=True,
            tokenize=False,
        )
        ids = tok(served, add_special_tokens=False)["input_ids"]
        assert tuple(ids) == tuple(policy.prompt_ids(obs))


def test_the_template_reaches_vllm_as_a_file_verbatim(tmp_path, monkeypatch):
    # Given inline, vLLM decodes escapes: the \b of \boxed would become a backspace.
    import coplay.serve as serving

    tok = train_tokenizer(["Your card: K Answer: [Bet]"] * 20, vocab_size=300)
    model = build_tiny_model(HEAD_32, vocab_size=len(tok), seed=0)
    text = TextConfig(answer="think-boxed")
    save_policy(LMPolicy(model, tok, mode="text", text=text), tmp_path / "boxed")
    seen = []

    def call(argv):
        file = Path(argv[argv.index("--chat-template") + 1])
        seen.append((file, file.read_text(encoding="utf-8")))
        return 0

    installed = SimpleNamespace(util=SimpleNamespace(find_spec=lambda name: True))
    monkeypatch.setattr(serving, "importlib", installed)  # as if vLLM were installed
    monkeypatch.setattr(serving, "subprocess", SimpleNamespace(call=call))
    assert serving.serve(tmp_path / "boxed") == 0
    [(file, written)] = seen
    plan = serve_plan(tmp_path / "boxed", host="127.0.0.1", port=8000, cuda=True)
    assert written == plan.chat_template and "\\boxed{Action}" in written
    assert not file.exists()  # removed when the server stops


def test_the_server_samples_as_the_text_policy_does(tmp_path):
    tok = train_tokenizer(["Your card: K Answer: [Bet]"] * 20, vocab_size=300, text=True)
    model = build_tiny_model(HEAD_32, vocab_size=len(tok), seed=0)
    text = TextConfig(top_p=0.5, top_k=5)
    policy = LMPolicy(model, tok, mode="text", temperature=0.7, max_new_tokens=6, text=text)
    save_policy(policy, tmp_path / "text")
    cmd = serve_plan(tmp_path / "text", host="127.0.0.1", port=1, cuda=True).command
    sampling = json.loads(cmd[cmd.index("--override-generation-config") + 1])
    assert sampling == {"temperature": 0.7, "top_p": 0.5, "top_k": 5, "max_new_tokens": 6}


@pytest.mark.parametrize(("heads", "refused"), [(2, False), (4, True)])
def test_a_gpt2_config_is_read_through_its_attribute_map(tmp_path, heads, refused):
    from transformers import GPT2Config

    # GPT-2 writes n_embd, n_head and n_positions, not hidden_size and its kin
    GPT2Config(n_embd=64, n_head=heads, n_layer=1, n_positions=128).save_pretrained(tmp_path)
    train_tokenizer(["Your card: K Action: [Bet]"] * 20, vocab_size=300).save_pretrained(tmp_path)
    if refused:
        with pytest.raises(ValueError, match="at least 32 dimensions, but this model's are 16"):
            serve_plan(tmp_path, host="127.0.0.1", port=1, cuda=False)
        return
    cmd = serve_plan(tmp_path, host="127.0.0.1", port=1, cuda=False).command
    assert cmd[cmd.index("--max-model-len") + 1] == "128"


def test_narrow_heads_are_refused_before_starting_a_server(run, tmp_path):
    tok = train_tokenizer(["Your card: K Action: [Bet]"] * 20, vocab_size=300)
    model = build_tiny_model(TinyModelConfig(vocab_size=300), vocab_size=len(tok), seed=0)
    save_policy(LMPolicy(model, tok), tmp_path / "narrow")
    with pytest.raises(ValueError, match="config.json: vLLM on a CPU needs .* at least 32"):
        serve_plan(tmp_path / "narrow", host="127.0.0.1", port=1, cuda=False)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(base_url: str, server: subprocess.Popen) -> None:
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"the server exited with status {server.returncode}")
        try:
            with urllib.request.urlopen(f"{base_url}/models", timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(2)
    raise AssertionError(f"the server did not answer within {READY_S} s")


@pytest.mark.vllm
def test_a_served_run_answers_chat_and_plays_a_full_game_as_a_remote_player(run):
    pytest.importorskip("vllm")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "coplay.cli", "serve", str(run), "--port", str(port)],
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        start_new_session=True,  # its own process group: the engine's children stop with it
    )
    try:
        base_url = f"http://127.0.0.1:{port}/v1"
        wait_ready(base_url, server)
        body = {"model": "kuhn-tiny", "messages": [{"role": "user", "content": "Your card: K"}]}
        request = urllib.request.Request(
            f"{base_url}/chat/completions",
            data=json.dumps(body | {"max_tokens": 6}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as reply:
            answer = json.load(reply)
        assert answer["model"] == "kuhn-tiny" and answer["usage"]["completion_tokens"] >= 1
        remote = remote_from_spec(f"remote:{base_url}#kuhn-tiny")
        remote.max_tokens = 8
        # The untrained model rarely names a legal action: those turns get the penalty
        # treatment (a random legal move), so every game still ends.
        penalty = InvalidActionConfig(on_fail="penalty", penalty=-1.0)
        make = lambda: make_env("kuhn_poker")  # noqa: E731
        result = play_match(make, remote, [RandomPolicy(0)], episodes=2, invalid=penalty)
        assert result.episodes == 2
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=60)
