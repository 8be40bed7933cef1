"""Remote endpoint policy against a tiny local chat-completions server (no real network)."""

import threading

import pytest

from coplay.envs.registry import make_env
from coplay.eval.matches import play_match
from coplay.policies.remote import RemotePolicy, RemotePolicyError, messages, remote_from_spec
from coplay.policies.scripted import RandomPolicy
from coplay.rollout.invalid import InvalidActionConfig
from coplay.types import Observation
from tests.policies.chat_server import FakeServer, completion, serving_fake

OBS = Observation(
    game="kuhn_poker",
    player=0,
    text="Your card: K.\nYour legal actions: [Pass] [Bet]\n",
    legal_actions=("[Pass]", "[Bet]"),
)


server = pytest.fixture(serving_fake, name="server")


def test_reply_is_parsed_into_a_legal_action_and_the_request_is_openai_shaped(server):
    policy = RemotePolicy(server.url, "tiny-model", api_key="k123", temperature=0.5)
    [dec] = policy.act([OBS])
    assert dec.action == "[Bet]" and dec.text == "I hold the king, so [Bet]"
    assert dec.policy_id == "remote:tiny-model" and not dec.trainable
    path, headers, body = server.requests[0]
    assert path == "/v1/chat/completions"
    assert headers["Authorization"] == "Bearer k123"
    assert body["model"] == "tiny-model" and body["temperature"] == 0.5
    assert body["messages"][-1] == {"role": "user", "content": OBS.text}
    assert body["messages"][0]["role"] == "system"


def test_chat_messages_of_the_observation_are_sent_as_they_are():
    obs = Observation("g", 0, "flat", ("[A]",), messages=(("system", "rules"), ("user", "go")))
    assert messages(obs, None) == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "go"},
    ]
    assert messages(OBS, "be brief")[0] == {"role": "system", "content": "be brief"}


def test_a_reply_without_a_legal_action_is_invalid_and_a_message_game_gets_the_text(server):
    server.reply = lambda body: (200, completion("I would rather [Raise]"))
    policy = RemotePolicy(server.url, "m")
    assert policy.act([OBS])[0].action is None
    talk = Observation("talk", 0, "Say something.", legal_actions=None)
    assert policy.act([talk])[0].action == "I would rather [Raise]"


def test_many_observations_are_answered_in_order(server):
    server.reply = lambda body: (200, completion(f"[{body['messages'][-1]['content']}]"))
    policy = RemotePolicy(server.url, "m", system_prompt=None, concurrency=4)
    obs = [Observation("g", 0, name, ("[A]", "[B]", "[C]")) for name in "ABCABC"]
    assert [d.action for d in policy.act(obs)] == [f"[{c}]" for c in "ABCABC"]


def test_http_errors_raise_or_become_invalid_decisions(server):
    server.reply = lambda body: (500, {"error": "model overloaded"})
    with pytest.raises(RemotePolicyError, match="HTTP 500.*model overloaded"):
        RemotePolicy(server.url, "m").act([OBS])
    [dec] = RemotePolicy(server.url, "m", on_error="invalid").act([OBS])
    assert dec.action is None and "HTTP 500" in dec.text


def test_malformed_response_and_timeout_give_clear_errors(server):
    server.reply = lambda body: (200, b"not json")
    with pytest.raises(RemotePolicyError, match="expected choices\\[0\\].message.content"):
        RemotePolicy(server.url, "m").act([OBS])
    server.reply = lambda body: (200, completion("[Bet]"))
    server.delay_s = 0.5
    with pytest.raises(RemotePolicyError, match="did not answer within 0.1 s"):
        RemotePolicy(server.url, "m", timeout_s=0.1).act([OBS])


def test_a_reply_that_is_not_http_is_a_remote_error_not_a_traceback():
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"

    def answer_garbage():
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b"SSH-2.0-not-http\r\n")
        conn.close()

    threading.Thread(target=answer_garbage, daemon=True).start()
    [dec] = RemotePolicy(url, "m", on_error="invalid", timeout_s=5).act([OBS])
    assert dec.action is None and "gave no valid HTTP answer" in dec.text
    listener.close()


def test_a_redirect_is_refused_so_the_key_stays_with_its_endpoint(server):
    other = FakeServer()  # where the redirect points: it must never see the key
    server.reply = lambda body: (302, b"")
    original = server.httpd.RequestHandlerClass.send_header

    def with_location(handler, key, value):
        original(handler, key, value)
        if key == "Content-Type" and handler.server is server.httpd:
            original(handler, "Location", other.url + "/chat/completions")

    server.httpd.RequestHandlerClass.send_header = with_location
    with pytest.raises(RemotePolicyError, match="HTTP 302"):
        RemotePolicy(server.url, "m", api_key="SECRET").act([OBS])
    assert other.requests == []
    other.httpd.shutdown()


def test_the_endpoint_samples_at_its_own_temperature_unless_one_is_given(server):
    # A served run samples at its checkpoint's temperature: a request's would override it.
    RemotePolicy(server.url, "m").act([OBS])
    RemotePolicy(server.url, "m", temperature=0.0).act([OBS])
    assert "temperature" not in server.requests[0][2]
    assert server.requests[1][2]["temperature"] == 0.0


def test_unreachable_endpoint_is_a_connection_error():
    with pytest.raises(ConnectionError, match="cannot reach"):
        RemotePolicy("http://127.0.0.1:9/v1", "m", timeout_s=2).act([OBS])


def test_plays_a_match_with_the_invalid_action_treatment(server):
    # Every other reply names no action: those turns get a random legal move and a penalty.
    count = iter(range(10_000))
    server.reply = lambda body: (200, completion("[Bet]" if next(count) % 2 else "hmm"))
    remote = RemotePolicy(server.url, "m", concurrency=1)
    make = lambda: make_env("kuhn_poker")  # noqa: E731
    penalty = InvalidActionConfig(on_fail="penalty", penalty=-1.0)
    res = play_match(make, remote, [RandomPolicy(0)], episodes=8, invalid=penalty)
    assert res.episodes == 8 and 0.3 < res.invalid_rate < 0.7


def test_spec_parsing_and_bad_arguments():
    env = {"HOST_KEY": "x", "OPENAI_API_KEY": "global"}
    policy = remote_from_spec("remote:https://host:8000/v1#qwen-7b@HOST_KEY", environ=env)
    assert (policy.url, policy.model, policy.api_key) == (
        "https://host:8000/v1/chat/completions",
        "qwen-7b",
        "x",
    )
    # Without @ENV_VAR no key is sent, however many keys the environment holds.
    assert remote_from_spec("remote:http://host:8000/v1#qwen-7b", environ=env).api_key is None
    for bad in ("remote:http://host:8000/v1", "remote:https://host/v1#m@"):
        with pytest.raises(ValueError, match="remote:URL#model"):
            remote_from_spec(bad, environ=env)
    with pytest.raises(ValueError, match="http:// or https://"):
        RemotePolicy("host:8000", "m")
    with pytest.raises(ValueError, match="timeout_s > 0"):
        RemotePolicy("http://host", "m", timeout_s=0)
    with pytest.raises(ValueError, match="http://host:abc/v1.*Port could not be cast"):
        RemotePolicy("http://host:abc/v1", "m")
    with pytest.raises(ValueError, match="on_error"):
        RemotePolicy("http://host", "m", on_error="ignore")


def test_a_named_key_variable_must_be_set():
    with pytest.raises(ValueError, match="environment variable HOST_KEY holding its key is unset"):
        remote_from_spec("remote:https://host/v1#m@HOST_KEY", environ={})


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("https://api.example.com/v1", True),
        ("http://localhost:8000/v1", True),
        ("http://127.0.0.1:8000/v1", True),
        ("http://127.5.0.1:8000/v1", True),
        ("http://[::1]:8000/v1", True),
        ("http://api.example.com/v1", False),
        ("http://10.0.0.7:8000/v1", False),
        ("http://localhost.example.com/v1", False),
    ],
)
def test_a_key_goes_over_plain_http_only_to_this_machine(url, allowed):
    spec = f"remote:{url}#m@K"
    if allowed:
        assert remote_from_spec(spec, environ={"K": "secret"}).api_key == "secret"
        return
    with pytest.raises(ValueError, match="refusing to send an API key over plain http://"):
        remote_from_spec(spec, environ={"K": "secret"})
    # Without a key the endpoint may be plain http anywhere: nothing secret is sent.
    assert remote_from_spec(f"remote:{url}#m", environ={"K": "secret"}).api_key is None


def test_the_named_key_reaches_its_endpoint(server):
    policy = remote_from_spec(f"remote:{server.url}#m@MINE", environ={"MINE": "k9"})
    policy.act([OBS])
    assert server.requests[-1][1]["Authorization"] == "Bearer k9"


def test_a_reply_without_text_is_an_invalid_decision_not_an_error(server):
    # content: null is a valid chat completion: a reasoning model cut off, a refusal
    server.reply = lambda body: (200, completion(None))
    [dec] = RemotePolicy(server.url, "m").act([OBS])
    assert dec.action is None and dec.text == ""
    talk = Observation("talk", 0, "Say something.", legal_actions=None)
    assert RemotePolicy(server.url, "m").act([talk])[0].action == ""


@pytest.mark.parametrize(
    ("kwargs", "refusal"),
    [
        ({"api_key": "κλειδί"}, "API key holds a non-ASCII or control character"),
        ({"api_key": "k123\n"}, "API key holds a non-ASCII or control character"),
        ({"base_url": "http://127.0.0.1:8000/v1/é"}, "non-ASCII characters; percent-encode"),
    ],
)
def test_what_an_http_request_cannot_carry_is_refused_when_built(kwargs, refusal):
    args = {"base_url": "http://127.0.0.1:8000/v1", "model": "m"} | kwargs
    with pytest.raises(ValueError, match=refusal) as err:
        RemotePolicy(**args)
    assert "κλειδί" not in str(err.value) and "k123" not in str(err.value)  # keys stay secret


def test_a_request_that_cannot_be_encoded_is_a_remote_error(server):
    policy = RemotePolicy(server.url, "m", on_error="invalid")
    policy.api_key = "κλειδί"  # set past the constructor's check
    [dec] = policy.act([OBS])
    assert dec.action is None and dec.text.startswith("error: cannot send a request")
