"""Debian's Chromium under Playwright: where it is, how it is launched, and who closes it.

    path = chromium_executable()          # /usr/bin/chromium (EVOHARNESS_CHROMIUM overrides)
    arrange_browsers_path()               # PLAYWRIGHT_BROWSERS_PATH -> a folder that links Playwright's
                                          # expected chromium-<rev> build to Debian's Chromium
    host = BrowserHost.shared()           # one Playwright + one Chromium per process ...
    context = host.new_context()          # ... and one isolated BrowserContext per environment
    host.release()                        # the last release closes Chromium

    python -m evoharness_rl.envs.webarena.browser --check   # launch, render a page, close (make setup runs it)

No browser is ever downloaded. `scripts/setup_system.sh` installs Debian's `chromium`
package; Playwright (pinned by the `webarena` extra) drives it in two ways:
- our own launches pass `executable_path` (the path above);
- code that calls `playwright.chromium.launch()` without it (BrowserGym's `BrowserEnv` and
  its chat window, used by the real-site path) finds the browser through
  `PLAYWRIGHT_BROWSERS_PATH`: `arrange_browsers_path` makes
  `<cache>/ms-playwright/chromium-<rev>/chrome-linux/chrome` a symbolic link to Debian's
  binary, `<rev>` read from the installed Playwright's `browsers.json`.

Lifetime: Chromium is a child of Playwright's driver (a node process), which is a child of
this Python process. `BrowserHost.close` (also run at interpreter exit) closes the browser
and stops the driver. If this process is killed (SIGKILL included), the driver reads
end-of-file on its stdin pipe and closes the browsers it launched before exiting; the
launch flags below keep Chromium from starting helper services that could outlive it.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any, Optional

CHROMIUM_ENV = "EVOHARNESS_CHROMIUM"  # an explicit Chromium binary (default: Debian's /usr/bin/chromium)
DEFAULT_CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = (
    "--no-sandbox",  # root in containers; the pages are our own local sites
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--no-first-run",
    "--mute-audio",
)
SETUP_HINT = "run `make setup` (it installs Debian's chromium package and the `webarena` extra)"


class BrowserUnavailable(RuntimeError):
    """Chromium or Playwright is missing; the message names the fix."""


def chromium_executable() -> str:
    """The Chromium binary to drive: $EVOHARNESS_CHROMIUM, else Debian's, else `chromium` on PATH."""
    explicit = os.environ.get(CHROMIUM_ENV)
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise BrowserUnavailable(f"{CHROMIUM_ENV}={explicit!r} is not an executable file")
        return explicit
    for candidate in (DEFAULT_CHROMIUM, shutil.which("chromium"), shutil.which("chromium-browser")):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise BrowserUnavailable(f"no Chromium found (looked for {DEFAULT_CHROMIUM} and `chromium` on PATH); "
                             f"{SETUP_HINT}, or `apt-get install -y chromium`, or set {CHROMIUM_ENV}")


def _playwright_chromium_revision() -> str:
    """The Chromium build revision the installed Playwright expects (its browsers.json)."""
    try:
        import playwright
    except ImportError as err:
        raise BrowserUnavailable(f"playwright is not installed ({err}); {SETUP_HINT}") from err
    listing = Path(playwright.__file__).parent / "driver" / "package" / "browsers.json"
    browsers = json.loads(listing.read_text())["browsers"]
    return next(str(b["revision"]) for b in browsers if b["name"] == "chromium")


def default_browsers_path() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "evoharness-rl" / "ms-playwright"


def arrange_browsers_path(root: Optional[Path] = None) -> Path:
    """Point PLAYWRIGHT_BROWSERS_PATH at a folder where Playwright's Chromium is Debian's (idempotent).

    An existing PLAYWRIGHT_BROWSERS_PATH set by the user is left alone.
    """
    if os.environ.get("PLAYWRIGHT_BROWSERS_PATH") and root is None:
        return Path(os.environ["PLAYWRIGHT_BROWSERS_PATH"])
    root = Path(root or default_browsers_path())
    executable = chromium_executable()
    link = root / f"chromium-{_playwright_chromium_revision()}" / "chrome-linux" / "chrome"
    if not (link.is_symlink() and os.readlink(link) == executable):
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".chrome.{os.getpid()}")
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(executable)
        os.replace(tmp, link)  # atomic: concurrent workers never see a half-made link
    os.environ["PLAYWRIGHT_BROWSERS_PATH"] = str(root)
    return root


class BrowserHost:
    """One Playwright driver and one headless Chromium per process, shared by its environments."""

    _shared: Optional["BrowserHost"] = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        try:
            from playwright.sync_api import sync_playwright
        except ImportError as err:
            raise BrowserUnavailable(f"playwright is not installed ({err}); {SETUP_HINT}") from err
        executable = chromium_executable()
        arrange_browsers_path()
        self._pw = sync_playwright().start()
        try:
            self._pw.selectors.set_test_id_attribute("bid")  # BrowserGym's element ids (get_elem_by_bid)
            self.browser = self._pw.chromium.launch(executable_path=executable, headless=True,
                                                    args=list(LAUNCH_ARGS))
        except Exception as err:
            self._pw.stop()
            raise BrowserUnavailable(f"Chromium at {executable} did not start ({type(err).__name__}: "
                                     f"{str(err).splitlines()[0] if str(err) else ''}); {SETUP_HINT}") from err
        self.users = 0
        self.closed = False
        self.pid = os.getpid()

    @classmethod
    def shared(cls) -> "BrowserHost":
        """The process's host (started on first use); each call must be paired with `release`."""
        with cls._lock:
            host = cls._shared
            if host is None or host.closed or host.pid != os.getpid() or not host.browser.is_connected():
                host = cls._shared = cls()
                atexit.register(host.close)
            host.users += 1
            return host

    def new_context(self, **kwargs: Any):
        return self.browser.new_context(**kwargs)

    def release(self) -> None:
        with self._lock:
            self.users -= 1
            if self.users <= 0:
                self.close()

    def close(self) -> None:
        """Close Chromium and stop the driver; safe to call twice."""
        if self.closed or self.pid != os.getpid():
            return
        self.closed = True
        if BrowserHost._shared is self:
            BrowserHost._shared = None
        for step in (self.browser.close, self._pw.stop):
            try:
                step()
            except Exception:  # noqa: BLE001 - the driver may already be gone
                pass


def check(verbose: bool = True) -> str:
    """Launch Chromium headless, render a page with script, read it back; returns the browser version."""
    host = BrowserHost.shared()
    try:
        context = host.new_context()
        page = context.new_page()
        page.set_content("<title>check</title><h1 id=h>static</h1>"
                         "<script>document.getElementById('h').textContent = 'rendered by ' + 'script';</script>")
        text = page.inner_text("#h")
        context.close()
        if text != "rendered by script":
            raise BrowserUnavailable(f"Chromium rendered {text!r} instead of the scripted text")
        version = host.browser.version
    finally:
        host.release()
    if verbose:
        print(f"webarena browser ok: Chromium {version} at {chromium_executable()}, "
              f"PLAYWRIGHT_BROWSERS_PATH={os.environ.get('PLAYWRIGHT_BROWSERS_PATH')}")
    return version


if __name__ == "__main__":  # pragma: no cover - `make setup` runs it
    if "--check" not in sys.argv[1:]:
        print("usage: python -m evoharness_rl.envs.webarena.browser --check", file=sys.stderr)
        sys.exit(2)
    try:
        check()
    except BrowserUnavailable as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(1)
