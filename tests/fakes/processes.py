"""Process-tree checks for tests of cleanup: which processes a command started, and that they are gone."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


def descendants(pid: int) -> set[int]:
    """Live (not zombie) descendant processes of `pid`, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    """The processes of `pids` that still run (zombies count as gone)."""
    running = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            running.add(pid)
    return running


def assert_gone(pids: set[int], grace_s: float, what: str) -> None:
    """Every process of `pids` exits within `grace_s` seconds."""
    deadline = time.monotonic() + grace_s
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(pids), f"left behind after {what}: {sorted(alive(pids))}"


def kill_and_expect_cleanup(proc: subprocess.Popen, started: set[int], sig, wait_s: float, grace_s: float) -> None:
    """Send `sig` to `proc`, wait for it, then for every process it had started to exit."""
    proc.send_signal(sig)
    proc.wait(wait_s)
    assert_gone(started, grace_s, getattr(sig, "name", str(sig)))
