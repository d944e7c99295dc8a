"""Run directories: resolved config (secrets removed), metrics.jsonl, a log file, progress bars.

    log = RunLogger(out_dir, cfg.logger)
    log.info("starting")                     # -> out_dir/run.log and the console
    log.metrics(step=3, success_rate=0.5)    # -> out_dir/metrics.jsonl (+ wandb)
    for x in progress(items, description="eval"): ...
"""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, TypeVar

T = TypeVar("T")

_SECRET_KEY = re.compile(r"(api_?key|token|password|secret)$", re.IGNORECASE)
REDACTED = "<redacted>"


def redact(data: Any, secrets: Optional[set[str]] = None) -> Any:
    """Remove secrets from a config dict: any key/token/password field (except the names of
    environment variables, `*_env`), any value equal to a `*_API_KEY` environment variable, and
    anything a URL in `data` carries as user, password or query (also where it appears elsewhere)."""
    if secrets is None:
        secrets = env_secrets() | secrets_in(data)
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            if _SECRET_KEY.search(str(key)) and value not in (None, "") and not isinstance(value, (dict, list)):
                out[key] = REDACTED
            else:
                out[key] = redact(value, secrets)
        return out
    if isinstance(data, list):
        return [redact(v, secrets) for v in data]
    if isinstance(data, str):
        return redact_text(data, secrets)
    return data


def env_secrets() -> set[str]:
    """The values of `*_API_KEY` environment variables."""
    return {v for k, v in os.environ.items() if k.upper().endswith("_API_KEY") and len(v) >= 4}


def secrets_in(data: Any) -> set[str]:
    """Secret values held by a config (dict, list or string): secret-named fields, and every URL's user,
    password and query values."""
    found: set[str] = set()
    if isinstance(data, dict):
        for key, value in data.items():
            if _SECRET_KEY.search(str(key)) and isinstance(value, str) and len(value) >= 4:
                found.add(value)
            found |= secrets_in(value)
    elif isinstance(data, (list, tuple)):
        for value in data:
            found |= secrets_in(value)
    elif isinstance(data, str) and "://" in data:
        from urllib.parse import parse_qsl, unquote

        for match in _URL.finditer(data):
            if match.group("userinfo"):
                userinfo = match.group("userinfo")
                for part in userinfo.split(":"):
                    found |= {part, unquote(part)}
                found.add(base64.b64encode(unquote(userinfo).encode()).decode())  # an HTTP Basic header's form
            for _, value in parse_qsl(match.group("query") or ""):
                found.add(value)
    return {s for s in found if len(s) >= 4}


_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?:(?P<userinfo>[^\s/@'\"?#]+)@)?(?P<host>[^\s/'\"?#]*)"
                  r"(?P<path>[^\s'\"?#]*)(?:\?(?P<query>[^\s'\"#]*))?")


def redact_text(text: str, secrets: Optional[set[str]] = None) -> str:
    """`text` with every secret in `secrets` (default: the `*_API_KEY` environment values) replaced by REDACTED,
    and every URL's user, password and query too: for config values, Hydra's files and error messages that may
    quote a server."""
    for secret in sorted(env_secrets() | set(secrets or ()), key=len, reverse=True):
        if secret and secret in text:
            text = text.replace(secret, REDACTED)
    if "://" not in text:
        return text

    def public(match: re.Match) -> str:
        userinfo = f"{REDACTED}@" if match.group("userinfo") else ""
        query = f"?{REDACTED}" if match.group("query") else ""
        return f"{match.group('scheme')}{userinfo}{match.group('host')}{match.group('path')}{query}"

    return _URL.sub(public, text)


def redact_file(path: str | os.PathLike, secrets: Optional[set[str]] = None) -> None:
    """Rewrite a text file (Hydra's multirun.yaml, .hydra/*.yaml) with `redact_text`, in place, when it holds one."""
    from evoharness_rl.fileio import atomic_write_text

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return
    clean = redact_text(text, secrets)
    if clean != text:
        atomic_write_text(path, clean)


class RunLogger:
    """Writes metrics.jsonl and run.log in `out_dir`; mirrors metrics to wandb when configured."""

    def __init__(self, out_dir: str | os.PathLike, logger_cfg: Any = None, config: Optional[dict] = None):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.out_dir / "metrics.jsonl"
        self.logger = logging.getLogger(f"evoharness_rl.run.{self.out_dir.resolve()}")
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        if not self.logger.handlers:
            fmt = logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S")
            file_handler = _QuietFileHandler(self.out_dir / "run.log", encoding="utf-8")
            file_handler.setFormatter(fmt)
            console = logging.StreamHandler(sys.stderr)
            console.setFormatter(fmt)
            self.logger.addHandler(file_handler)
            self.logger.addHandler(console)
        self._wandb = None
        if logger_cfg is not None and getattr(logger_cfg, "backend", "jsonl") == "wandb":
            self._wandb = _start_wandb(self.out_dir, logger_cfg, config)

    def info(self, message: str) -> None:
        self.logger.info(message)

    def warning(self, message: str) -> None:
        self.logger.warning(message)

    def metrics(self, step: int, **values: Any) -> None:
        record = {"step": step, "time": round(time.time(), 3), **values}
        append_line(self.metrics_path, json.dumps(record, default=float))
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in values.items() if isinstance(v, (int, float))}, step=step)

    def table(self, name: str, columns: list[str], rows: list[list], step: int) -> None:
        """A table of rows (wandb only: `wandb.Table` logged under `name`; the JSON records are the files)."""
        if self._wandb is not None and rows:
            import wandb

            self._wandb.log({name: wandb.Table(columns=list(columns), data=[list(r) for r in rows])}, step=step)

    def close(self) -> None:
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
        for handler in list(self.logger.handlers):
            handler.close()
            self.logger.removeHandler(handler)


class _QuietFileHandler(logging.FileHandler):
    """run.log's handler: a line it cannot write (a full disk) is dropped, not printed as a logging traceback; the
    console still shows it, and the write that fills the disk fails with its own one-line error."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


def append_line(path: Path, line: str) -> None:
    """Append one line to a JSONL log, whole or not at all: a failed write (a full disk) cuts the file back to
    where it ended, so no half line is left for the next reader."""
    size = path.stat().st_size if path.exists() else None
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except BaseException:
        if size is None:
            path.unlink(missing_ok=True)
        else:
            os.truncate(path, size)
        raise


def _start_wandb(out_dir: Path, logger_cfg: Any, config: Optional[dict]):
    import wandb

    # Without a key wandb would prompt or fail; offline mode never blocks and can be synced later
    # (`wandb sync out_dir/wandb/offline-run-*`). WANDB_MODE, when set, decides.
    mode = os.environ.get("WANDB_MODE") or ("online" if os.environ.get("WANDB_API_KEY") else "offline")
    return wandb.init(
        project=logger_cfg.project,
        entity=logger_cfg.entity,
        name=logger_cfg.run_name or out_dir.name,
        dir=str(out_dir),
        config=redact(config or {}),
        mode=mode,
    )


def read_metrics(out_dir: str | os.PathLike) -> list[dict]:
    path = Path(out_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


_PROGRESS_ENABLED = True


def set_progress(enabled: bool) -> None:
    """Turn progress bars on/off globally (logger.progress)."""
    global _PROGRESS_ENABLED
    _PROGRESS_ENABLED = enabled


def progress(iterable: Iterable[T], total: Optional[int] = None, description: str = "") -> Iterator[T]:
    """`ProgressBar` over `iterable`, advanced once per item."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    with ProgressBar(total, description) as bar:
        for item in iterable:
            yield item
            bar.advance()


PROGRESS_FILE_ENV = "EVOHARNESS_PROGRESS_FILE"  # a file that always holds one line: every live bar's state
LOG_EVERY_S = 30.0  # without a terminal, a plain progress line on stderr this often (a job's log keeps it)
_FILE_EVERY_S = 1.0
_live: list["ProgressBar"] = []  # open bars, outermost first (GRPO's updates, then one update's episodes)
_last_file_write = 0.0
_last_log_line = 0.0


class ProgressBar:
    """A progress bar: step / total, time left and what the caller adds (`info`, e.g. tokens/s).

    Where it shows: a rich bar on a terminal (logger.progress=true); a plain line on stderr every 30 s
    otherwise (logger.progress=true), so a background job's log keeps its progress; and, whenever
    $EVOHARNESS_PROGRESS_FILE is set, that file holds one line with every open bar, rewritten at most
    once a second (scripts/jobs.sh shows it for each running stage).
    `completed`: steps already done when the bar opens (a resumed run); time left counts from this run's own pace.
    """

    def __init__(self, total: Optional[int], description: str = "", completed: int = 0):
        self.total, self.description, self.done, self.info = total, description, completed, ""
        self._start, self._start_done = time.monotonic(), completed
        self._bar = None
        if _PROGRESS_ENABLED and sys.stderr.isatty():
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       TimeRemainingColumn(), TextColumn("{task.fields[info]}"))
            self._bar = Progress(*columns)
            self._bar.start()
            self._task = self._bar.add_task(description, total=total, completed=completed, info="")
        _live.append(self)
        _report(force=True)

    def advance(self, n: int = 1, info: Optional[str] = None) -> None:
        """`n` more steps done; `info` replaces the bar's extra text."""
        self.done += n
        if info is not None:
            self.info = info
        if self._bar is not None:
            self._bar.update(self._task, advance=n, info=self.info)
        _report()

    def line(self) -> str:
        """'sft 120/560 (21%) · 6.1k tok/s · 4m12s left'."""
        text = f"{self.description} {self.done}" + (f"/{self.total}" if self.total else "")
        if self.total:
            text += f" ({100 * self.done / self.total:.0f}%)"
        if self.info:
            text += f" · {self.info}"
        pace, left = self.done - self._start_done, (self.total or 0) - self.done
        if pace > 0 and left > 0:
            text += f" · {_duration(left * (time.monotonic() - self._start) / pace)} left"
        return text

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        if self in _live:
            _live.remove(self)
            _report(force=True)

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def _report(force: bool = False) -> None:
    """Rewrite the progress file (at most once a second) and, without a terminal, log a line every LOG_EVERY_S."""
    global _last_file_write, _last_log_line
    now = time.monotonic()
    target = os.environ.get(PROGRESS_FILE_ENV)
    write_file = bool(target) and (force or now - _last_file_write >= _FILE_EVERY_S)
    log_line = _PROGRESS_ENABLED and now - _last_log_line >= LOG_EVERY_S and not sys.stderr.isatty()
    if not (write_file or log_line):
        return  # most advances: nothing is due, so no line is built
    line = " | ".join(bar.line() for bar in _live)
    if write_file:
        _last_file_write = now
        try:
            tmp = f"{target}.tmp"
            Path(tmp).write_text(line + "\n", encoding="utf-8")
            os.replace(tmp, target)
        except OSError:
            pass  # progress is best effort: a full disk or a removed folder must not stop the run
    if log_line and line:
        if _last_log_line:
            print(f"[progress] {line}", file=sys.stderr, flush=True)
        _last_log_line = now


def cpu_model() -> str:
    """The machine's CPU model name (/proc/cpuinfo), which the benchmarks report next to every figure."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"
