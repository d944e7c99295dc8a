"""A loopback OpenAI-compatible server that misbehaves: it hangs (accepts, never answers) or answers an HTTP error.

    with HungServer(models="ok", chat="hang") as server:   # GET /v1/models answers, POST hangs
        ... server.url ...

`models` / `chat`: "ok" (a valid answer), "hang" (no answer until the server closes, at most `max_hang_s`), or
an int HTTP status. Only 127.0.0.1; every wait is bounded. Runs as a script too (for a CLI in a subprocess):
`python -m tests.fakes.hung_server MODELS CHAT` prints the URL, then serves until stdin closes.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class HungServer:
    def __init__(self, models: str | int = "ok", chat: str | int = "hang", max_hang_s: float = 60.0):
        self.models, self.chat, self.max_hang_s = models, chat, max_hang_s
        self.hits: list[str] = []
        self.closing = threading.Event()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802 (http.server API)
                server.hits.append("GET " + self.path)
                self._act(server.models, {"object": "list", "data": [{"id": "m", "object": "model"}]})

            def do_POST(self):  # noqa: N802
                server.hits.append("POST " + self.path)
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                self._act(server.chat, {"id": "c", "object": "chat.completion", "created": 0,
                                        "model": body.get("model", "m"),
                                        "choices": [{"index": 0, "finish_reason": "stop",
                                                     "message": {"role": "assistant", "content": "ok"}}]})

            def _act(self, how, payload):
                if how == "hang":
                    server.closing.wait(server.max_hang_s)
                    return
                status = 200 if how == "ok" else int(how)
                data = json.dumps(payload if status == 200 else {"error": {"message": f"status {status}"}}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.closing.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> "HungServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _arg(value: str) -> str | int:
    return int(value) if value.isdigit() else value


if __name__ == "__main__":
    with HungServer(_arg(sys.argv[1]), _arg(sys.argv[2])) as running:
        print(running.url, flush=True)
        sys.stdin.read()  # serve until the parent closes our stdin
