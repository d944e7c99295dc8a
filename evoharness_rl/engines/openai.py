"""`openai` backend: any OpenAI-compatible chat endpoint (teachers, consolidators, frontier baselines).

Text in, text out (no token ids). Retries (`Endpoint`): connection errors, 408/409/429
and 5xx are retried `max_retries` times with exponential backoff (0.5 s doubling up to
8 s, with jitter; a server's `Retry-After` / `retry-after-ms` header takes precedence).
A request that still fails becomes `Completion(error=<reason>, finish_reason="error")`
(its HTTP status in the reason): one bad request never raises and never takes the rest
of the batch down. At most `concurrency` requests are in flight.

A server that gives no answer at all is different: a request that waited its whole
`request_timeout_s` while the server answered nothing else is not retried (a hung
server would only hang again) but ends the run with `ServerUnresponsive`, one line
naming the URL and the timeout. Its total time is bounded by `request_timeout_s`, and
after `WAIT_WARNING_S` without an answer a warning line says what it is waiting for.

The API key is read from the environment variable named by `api_key_env` and is never
logged; when the variable is unset, the placeholder "EMPTY" is sent (what local vLLM
servers expect).
"""

from __future__ import annotations

import logging
import os
import random
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional, Sequence, TypeVar

from evoharness_rl.engines.base import Completion, GenerationBackend, GenerationRequest, SamplingSettings
from evoharness_rl.errors import UserError

log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

WAIT_WARNING_S = 30.0  # a request without an answer for this long prints one warning line (once per endpoint)
RETRY_STATUSES = (408, 409, 429)  # and every 5xx
BACKOFF_S, MAX_BACKOFF_S, MAX_RETRY_AFTER_S = 0.5, 8.0, 60.0


def make_client(base_url: str, api_key_env: str = "OPENAI_API_KEY", max_retries: int = 4, timeout: float = 120.0):
    """An `openai.OpenAI` client for `base_url` with the key from `$api_key_env`."""
    import openai

    if not base_url:
        raise ValueError("policy.base_url is not set; give the endpoint, e.g. http://127.0.0.1:8000/v1")
    key = os.environ.get(api_key_env)
    if not key:
        log.warning("environment variable %s is not set; sending the placeholder key 'EMPTY'", api_key_env)
        key = "EMPTY"
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=max_retries, timeout=timeout)


class ServerUnresponsive(UserError):
    """A server that answered nothing for a request's whole timeout: the run ends with this one line."""


class Endpoint:
    """Requests to one OpenAI-compatible server, with our retries and a bounded wait.

    `call(send)` runs `send(timeout_s)` (one HTTP request of an `openai` client built with max_retries=0),
    retrying connection errors and 408/409/429/5xx answers with backoff. A request that times out is not retried:
    when nothing else came back from the server while it waited, `ServerUnresponsive` names the URL and the
    timeout (`prefix` is the config group: policy / experience); when other requests were answered meanwhile,
    the timeout is this request's own error."""

    def __init__(self, url: Any, timeout_s: float, max_retries: int, prefix: str = "policy"):
        self.url, self.timeout_s, self.max_retries, self.prefix = url, float(timeout_s), int(max_retries), prefix
        self.last_answer = 0.0  # time.monotonic() of the server's last answer of any kind
        self._warned = threading.Event()

    def call(self, send: Callable[[float], T]) -> T:
        import openai

        started = time.monotonic()
        warning = threading.Timer(WAIT_WARNING_S, self._warn_waiting)  # (a shorter timeout says it all itself)
        warning.daemon = True
        if self.timeout_s > WAIT_WARNING_S:
            warning.start()
        try:
            for attempt in range(self.max_retries + 1):
                try:
                    result = send(self.timeout_s)
                    self.last_answer = time.monotonic()
                    return result
                except openai.APITimeoutError:
                    if self.last_answer > started:  # the server answers others: this request was slow
                        raise
                    raise self.unresponsive() from None
                except openai.APIStatusError as exc:
                    self.last_answer = time.monotonic()
                    status = exc.status_code
                    if attempt == self.max_retries or not (status in RETRY_STATUSES or status >= 500):
                        raise
                    delay = _retry_after(exc.response) or _backoff(attempt)
                except openai.APIConnectionError:
                    if attempt == self.max_retries:
                        raise
                    delay = _backoff(attempt)
                time.sleep(delay)
            raise AssertionError("unreachable")  # the last attempt returns or raises
        finally:
            warning.cancel()

    def unresponsive(self) -> ServerUnresponsive:
        return ServerUnresponsive(
            f"{self.prefix}.base_url={public_url(self.url)} gave no answer within {self.prefix}.request_timeout_s="
            f"{self.timeout_s:g} s (it accepts connections but does not reply); check that server, or raise "
            f"{self.prefix}.request_timeout_s if its answers take longer")

    def _warn_waiting(self) -> None:
        if not self._warned.is_set():
            self._warned.set()
            print(f"warning: no answer from {public_url(self.url)} for {WAIT_WARNING_S:g} s; waiting up to "
                  f"{self.prefix}.request_timeout_s={self.timeout_s:g} s", file=sys.stderr, flush=True)


def _backoff(attempt: int) -> float:
    """0.5 s doubling up to 8 s, less up to 25% jitter (what the `openai` client does)."""
    return min(BACKOFF_S * 2 ** attempt, MAX_BACKOFF_S) * (1 - 0.25 * random.random())


def _retry_after(response: Any) -> Optional[float]:
    """The wait a server asks for (`retry-after-ms`, else `retry-after` in seconds), when it is a sane one."""
    headers = getattr(response, "headers", None) or {}
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            wait = float(headers.get(name)) / scale
        except (TypeError, ValueError):
            continue
        if 0 < wait <= MAX_RETRY_AFTER_S:
            return wait
    return None


def map_concurrently(fn: Callable[[T], R], items: Sequence[T], concurrency: int) -> list[R]:
    """`[fn(x) for x in items]` with at most `concurrency` calls in flight, in order."""
    if len(items) <= 1 or concurrency <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=min(concurrency, len(items))) as pool:
        return list(pool.map(fn, items))


class EndpointError(RuntimeError):
    """A request that failed after the client's retries; the message is `error_completion`'s one redacted line."""


def error_completion(exc: BaseException, url: Any = "", key: str = "") -> Completion:
    """The Completion of a request to `url` that failed after the client's retries (one line, URL without secrets;
    the server's message without the key or anything the URL carried, should the server echo them)."""
    from evoharness_rl.runlog import redact_text, secrets_in

    status = getattr(exc, "status_code", None)
    detail = redact_text(" ".join(str(exc).split()), secrets_in(str(url)) | ({key} if len(key or "") >= 4 else set()))
    reason = f"{type(exc).__name__}" + (f" (HTTP {status})" if status else "") + f" from {public_url(url)}: {detail}"
    return Completion(text="", finish_reason="error", error=reason[:500])


def public_url(url: Any) -> str:
    """`url` without user, password, query or fragment: what may appear in errors and logs."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(str(url))
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def check_reachable(base_url: str, key: str = "policy.base_url", timeout: float = 10.0) -> None:
    """Refuse an endpoint that nothing answers at (no server, a wrong port or host) before any work starts, in one
    line without the URL's secrets; any HTTP answer, an error status included, counts as a server."""
    import httpx

    from evoharness_rl.errors import Refusal
    from evoharness_rl.runlog import redact_text, secrets_in

    if not base_url:
        return  # make_client says what to give
    try:
        url = httpx.URL(str(base_url))
        httpx.get(url.copy_with(path=url.path.rstrip("/") + "/models"), timeout=timeout)
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.UnsupportedProtocol) as exc:
        reason = redact_text(" ".join(str(exc).split()), secrets_in(str(base_url))) or type(exc).__name__
        raise Refusal(f"{key}={public_url(base_url)}: no server answers there ({reason}); start the server, or point "
                      f"{key} at a running one") from None
    except httpx.ReadTimeout:  # it accepted the connection and said nothing: a hung server
        raise Refusal(f"{key}={public_url(base_url)}: the server accepts connections but gave no answer to "
                      f"GET /models within {timeout:g} s; check (or restart) that server") from None
    except httpx.HTTPError:
        pass  # it answered, if badly: the run reports what it says


class OpenAIBackend(GenerationBackend):
    """Chat completions from an OpenAI-compatible endpoint; text only."""

    uses_tokens = False
    tokenizer = None

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 8,
        max_retries: int = 4,
        timeout: float = 120.0,
    ):
        if not model:
            raise ValueError("the openai backend needs a model name (policy.model_name, or model.path)")
        self.model = model
        self.concurrency = concurrency
        self.client = make_client(base_url, api_key_env, 0, timeout)  # retries: self.endpoint's
        self.endpoint = Endpoint(base_url, timeout, max_retries, "policy")

    def generate(self, requests: list[GenerationRequest], sampling: SamplingSettings) -> list[Completion]:
        return map_concurrently(lambda r: self._one(r.messages, sampling), requests, self.concurrency)

    def _one(self, messages: list[dict[str, str]], sampling: SamplingSettings) -> Completion:
        try:
            response = self.endpoint.call(lambda timeout: self.client.chat.completions.create(
                model=self.model,
                messages=messages,
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                max_completion_tokens=sampling.max_new_tokens,
                seed=sampling.seed,
                timeout=timeout,
            ))
        except ServerUnresponsive:
            raise  # a hung server ends the run (one line), it does not error every episode one by one
        except Exception as exc:  # noqa: BLE001 - any failure after retries is this request's error
            return error_completion(exc, self.client.base_url, self.client.api_key)
        if not response.choices:
            return Completion(text="", finish_reason="error", error="the endpoint returned no choices")
        choice = response.choices[0]
        finish = "length" if choice.finish_reason == "length" else "stop"
        return Completion(text=choice.message.content or "", finish_reason=finish)

    def chat_text(self, messages: list[dict[str, str]], sampling: Optional[SamplingSettings] = None) -> str:
        """One chat call returning the reply text (the consolidator's interface).

        Raises RuntimeError with the reason when the request fails after retries.
        """
        completion = self._one(messages, sampling or SamplingSettings(temperature=0.0, max_new_tokens=2048))
        if completion.error is not None:
            raise RuntimeError(f"chat request failed: {completion.error}")
        return completion.text

    def release(self) -> None:
        self.client.close()
