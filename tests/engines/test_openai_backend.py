"""openai backend against a tiny local HTTP server: retries with backoff, errors per request, concurrency, key."""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evoharness_rl.engines.base import GenerationRequest, SamplingSettings
from evoharness_rl.engines.openai import OpenAIBackend

MESSAGES = [{"role": "user", "content": "hello"}]


class FlakyServer:
    """Answers /v1/chat/completions: the first `failures` requests get `status`, the rest a reply."""

    def __init__(self, failures: int = 0, status: int = 500, retry_after_ms: int | None = 10, delay_s: float = 0.0):
        self.failures, self.status, self.retry_after_ms, self.delay_s = failures, status, retry_after_ms, delay_s
        self.hits: list[float] = []
        self.auth: list[str] = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.hits.append(time.monotonic())
                    server.auth.append(self.headers.get("Authorization", ""))
                    failing = len(server.hits) <= server.failures
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                time.sleep(server.delay_s)
                with server.lock:
                    server.in_flight -= 1
                if failing:
                    self._send(server.status, {"error": {"message": "overloaded"}})
                else:
                    text = "echo: " + body["messages"][-1]["content"]
                    self._send(200, {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                                     "choices": [{"index": 0, "finish_reason": "stop",
                                                  "message": {"role": "assistant", "content": text}}]})

            def _send(self, status, payload):
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status != 200 and server.retry_after_ms is not None:
                    self.send_header("retry-after-ms", str(server.retry_after_ms))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve():
    servers = []

    def start(**kwargs):
        servers.append(FlakyServer(**kwargs))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _requests(n):
    return [GenerationRequest(messages=[{"role": "user", "content": f"q{i}"}], key=f"e{i}") for i in range(n)]


def test_retries_500_then_succeeds(serve):
    server = serve(failures=2)
    backend = OpenAIBackend(server.url, "m", max_retries=3)
    [c] = backend.generate(_requests(1), SamplingSettings())
    assert c.error is None and c.text == "echo: q0" and c.finish_reason == "stop"
    assert len(server.hits) == 3


def test_backoff_grows_exponentially(serve):
    server = serve(failures=2, retry_after_ms=None)  # no Retry-After: the client's own backoff
    backend = OpenAIBackend(server.url, "m", max_retries=2)
    [c] = backend.generate(_requests(1), SamplingSettings())
    assert c.error is None
    first_gap, second_gap = server.hits[1] - server.hits[0], server.hits[2] - server.hits[1]
    assert 0.3 < first_gap < second_gap  # 0.5 s then 1 s (minus up to 25% jitter)


def test_failure_after_retries_is_an_error_completion_not_an_exception(serve):
    server = serve(failures=100, status=503)
    backend = OpenAIBackend(server.url, "m", max_retries=2)
    out = backend.generate(_requests(2), SamplingSettings())
    assert [c.finish_reason for c in out] == ["error", "error"]
    assert all("503" in c.error and c.text == "" for c in out)
    assert len(server.hits) == 6  # 1 + 2 retries each
    with pytest.raises(RuntimeError, match="503"):
        backend.chat_text(MESSAGES)


def test_rate_limit_is_retried(serve):
    server = serve(failures=1, status=429)
    [c] = OpenAIBackend(server.url, "m", max_retries=1).generate(_requests(1), SamplingSettings())
    assert c.error is None and len(server.hits) == 2


def test_connection_refused_is_an_error_completion(serve):
    server = serve()
    url = server.url
    server.close()
    [c] = OpenAIBackend(url, "m", max_retries=1, timeout=2).generate(_requests(1), SamplingSettings())
    assert c.finish_reason == "error" and "Connection" in c.error


def test_concurrency_limit(serve):
    server = serve(delay_s=0.2)
    out = OpenAIBackend(server.url, "m", concurrency=2).generate(_requests(6), SamplingSettings())
    assert [c.text for c in out] == [f"echo: q{i}" for i in range(6)]  # order kept
    assert server.max_in_flight == 2


def test_key_from_env_var_is_sent_and_never_logged(serve, monkeypatch, caplog):
    server = serve()
    monkeypatch.setenv("EVOHARNESS_TEST_KEY", "sk-very-secret")
    caplog.set_level(logging.DEBUG)
    backend = OpenAIBackend(server.url, "m", api_key_env="EVOHARNESS_TEST_KEY")
    assert backend.chat_text(MESSAGES) == "echo: hello"
    assert server.auth == ["Bearer sk-very-secret"]
    assert "sk-very-secret" not in caplog.text


def test_missing_key_env_var_sends_placeholder(serve, monkeypatch, caplog):
    server = serve()
    monkeypatch.delenv("EVOHARNESS_UNSET_KEY", raising=False)
    with caplog.at_level(logging.WARNING):
        OpenAIBackend(server.url, "m", api_key_env="EVOHARNESS_UNSET_KEY").chat_text(MESSAGES)
    assert server.auth == ["Bearer EMPTY"] and "EVOHARNESS_UNSET_KEY" in caplog.text
