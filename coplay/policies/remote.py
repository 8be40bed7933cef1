"""A policy served by an OpenAI-compatible chat-completions endpoint.

vLLM (``vllm serve``), Text Generation Inference and llama.cpp's server all answer
``POST {base_url}/chat/completions``. The prompt is the observation's chat messages
(or its text as one user message, after an optional system prompt); the reply is
parsed with the game's action parser (``coplay.envs.actions.parse_action``), and a
reply naming no legal action is an invalid decision, which the rollout engine treats
as the game is configured to (retry, penalty or forfeit); so is a reply without text
(``content: null``: a reasoning model cut off, a refusal). To an observation without
a legal list the reply is a message, passed on whole as the language-model policy does.
A run served by ``coplay serve`` renders its own policy's prompt in place of the
system prompt sent here (``coplay.serve``).

Only the standard library is used. The policy is for evaluation and as an opponent:
it returns no token ids or log-probs, so it is never trained.

API keys are per endpoint: ``remote:URL#model@ENV_VAR`` sends the key held in the
environment variable ``ENV_VAR`` to that endpoint only; without ``@ENV_VAR`` no key is
sent. A key never goes over plain ``http://`` except to the local machine (localhost,
127.0.0.0/8, ::1): anyone on the path could read it.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from enum import StrEnum

from coplay.envs.actions import parse_action
from coplay.types import Decision, Observation

DEFAULT_SYSTEM_PROMPT = (
    "You are playing a game. Think briefly if you like, then end your reply with "
    "exactly one of your legal actions, written in brackets as shown, e.g. [Bet]."
)


class RemotePolicyError(ConnectionError):
    """The endpoint could not be reached or gave no usable answer."""


class OnError(StrEnum):
    """What a failed request becomes."""

    RAISE = "raise"
    """Stop with a ``RemotePolicyError``."""
    INVALID = "invalid"
    """An invalid decision (no action); the game's invalid-action treatment applies."""


class RemotePolicy:
    """Acts by asking ``model`` at ``base_url`` (for example ``http://host:8000/v1``)."""

    mode = "text"
    """It answers in free text: exact evaluation reads it through its sampled answers
    (``coplay.eval.sampled``), as it reads a text-mode checkpoint."""

    version: int = 0

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int = 256,
        timeout_s: float = 60.0,
        concurrency: int = 8,
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        on_error: OnError | str = OnError.RAISE,
        policy_id: str | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if not base_url.isascii():  # http.client writes the request line in ASCII
            raise ValueError(
                f"base_url {base_url!r} holds non-ASCII characters; percent-encode them "
                "(é as %C3%A9) and write a host name in its xn-- form"
            )
        try:  # a bad port would otherwise surface at the first request, as http.client's
            _ = urllib.parse.urlsplit(base_url).port
        except ValueError as err:
            raise ValueError(f"base_url {base_url!r}: {err}") from None
        if not model:
            raise ValueError("model must name the served model, got an empty string")
        if (temperature or 0) < 0 or max_tokens < 1 or timeout_s <= 0 or concurrency < 1:
            raise ValueError(
                "need temperature >= 0, max_tokens >= 1, timeout_s > 0 and concurrency >= 1; got "
                f"{temperature}, {max_tokens}, {timeout_s}, {concurrency}"
            )
        if on_error not in tuple(OnError):
            raise ValueError(
                f"on_error must be one of {[e.value for e in OnError]}, got {on_error!r}"
            )
        if api_key:
            _check_key(api_key, policy_id or f"remote:{model}")
            refuse_plain_http_key(base_url, policy_id or f"remote:{model}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.concurrency = concurrency
        self.system_prompt = system_prompt
        self.on_error = OnError(on_error)
        self.policy_id = policy_id or f"remote:{model}"
        # An opener of its own: proxy settings are read now, not from a process-wide cache.
        # Redirects are refused: urllib would carry the key to wherever one points.
        self._opener = urllib.request.build_opener(_NoRedirects)

    def act(self, observations: Sequence[Observation]) -> list[Decision]:
        """One request per observation, ``concurrency`` at a time (servers batch them)."""
        if len(observations) <= 1 or self.concurrency == 1:
            return [self._decide(obs) for obs in observations]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(observations))) as pool:
            return list(pool.map(self._decide, observations))

    def _decide(self, observation: Observation) -> Decision:
        try:
            reply = self.complete(messages(observation, self.system_prompt))
        except RemotePolicyError as err:
            if self.on_error is OnError.RAISE:
                raise
            return Decision(text=f"error: {err}", action=None, policy_id=self.policy_id)
        legal = observation.legal_actions
        # Without a legal list the reply is a message, which the game's own parser reads.
        action = reply if legal is None else parse_action(reply, legal)
        return Decision(text=reply, action=action, policy_id=self.policy_id)

    def complete(self, chat: Sequence[dict[str, str]]) -> str:
        """The endpoint's reply text to ``chat``; RemotePolicyError on any failure."""
        body = {"model": self.model, "messages": list(chat), "max_tokens": self.max_tokens}
        if self.temperature is not None:  # else the endpoint's own (a served run's)
            body["temperature"] = self.temperature
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        return _reply_text(self._send(request), self.url)

    def _send(self, request: urllib.request.Request) -> bytes:
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                return response.read()
        except urllib.error.HTTPError as err:
            detail = err.read().decode(errors="replace")[:200]
            raise RemotePolicyError(f"{self.url} answered HTTP {err.code}: {detail}") from err
        except TimeoutError as err:
            raise RemotePolicyError(f"{self.url} did not answer within {self.timeout_s} s") from err
        except http.client.HTTPException as err:  # not HTTP, a cut-off body, a huge line
            raise RemotePolicyError(f"{self.url} gave no valid HTTP answer: {err!r}") from err
        except UnicodeError as err:  # a header or URL that http.client cannot encode
            raise RemotePolicyError(f"cannot send a request to {self.url}: {err}") from err
        except (urllib.error.URLError, OSError) as err:
            reason = getattr(err, "reason", err)
            if isinstance(reason, TimeoutError):
                raise RemotePolicyError(
                    f"{self.url} did not answer within {self.timeout_s} s"
                ) from err
            raise RemotePolicyError(f"cannot reach {self.url}: {reason}") from err


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Every redirect stays the HTTP error it is (``RemotePolicyError`` names it)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


def messages(observation: Observation, system_prompt: str | None) -> list[dict[str, str]]:
    """Chat messages for one observation: its own, or its text as the user's turn."""
    chat = [{"role": "system", "content": system_prompt}] if system_prompt else []
    if observation.messages:
        return chat + [{"role": r, "content": c} for r, c in observation.messages]
    return chat + [{"role": "user", "content": observation.text}]


def _reply_text(raw: bytes, url: str) -> str:
    """``choices[0].message.content`` of a chat-completions response."""
    try:
        content = json.loads(raw)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise RemotePolicyError(
            f"{url} gave no chat completion (expected choices[0].message.content): {raw[:200]!r}"
        ) from err
    if content is None:  # the schema allows it (a model cut off, a refusal): no action
        return ""
    if not isinstance(content, str):
        raise RemotePolicyError(f"{url} gave non-text content: {content!r}")
    return content


SPEC_FORM = "remote:URL#model or remote:URL#model@ENV_VAR"


def remote_from_spec(spec: str, *, environ: Mapping[str, str] | None = None) -> RemotePolicy:
    """A RemotePolicy from ``remote:URL#model[@ENV_VAR]``, e.g.
    ``remote:https://api.example.com/v1#qwen@EXAMPLE_API_KEY``: the key is read from
    ``ENV_VAR`` in ``environ`` (default ``os.environ``); without ``@ENV_VAR`` no key is sent."""
    body = spec.removeprefix("remote:")
    url, sep, tail = body.rpartition("#")
    model, at, env_var = tail.partition("@")
    if not spec.startswith("remote:") or not sep or not url or not model or (at and not env_var):
        raise ValueError(f"remote player must be written {SPEC_FORM}, got {spec!r}")
    key = None
    if env_var:
        environ = os.environ if environ is None else environ
        key = environ.get(env_var)
        if not key:
            raise ValueError(f"{spec}: the environment variable {env_var} holding its key is unset")
    return RemotePolicy(url, model, key, policy_id=spec)


def _check_key(api_key: str, who: str) -> None:
    """A ValueError, without the key, when ``api_key`` cannot go in an HTTP header."""
    if not (api_key.isascii() and api_key.isprintable()):
        raise ValueError(
            f"{who}: the API key holds a non-ASCII or control character (a line break "
            "read with it?); an HTTP header carries printable ASCII only"
        )


LOCAL_HOSTS = ("localhost",)


def is_local(host: str) -> bool:
    """Whether ``host`` is this machine: localhost or a loopback address."""
    if host.lower() in LOCAL_HOSTS or host.lower().endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refuse_plain_http_key(base_url: str, who: str) -> None:
    """A ValueError when a key would go to ``base_url`` unencrypted, off this machine."""
    parts = urllib.parse.urlsplit(base_url)
    if parts.scheme == "http" and not is_local(parts.hostname or ""):
        raise ValueError(
            f"{who}: refusing to send an API key over plain http:// to {parts.hostname}; "
            "use https:// (keys go over http:// only to localhost)"
        )
