"""WebArena's native action syntax, parsed and mapped onto BrowserGym's action set.

    parsed = parse_action("type [11] [kettle] [1]")   # BrowserAction or ActionError
    parsed.calls   # ["fill('11', 'kettle')", "press('11', 'Enter')"]  (BrowserGym high-level calls)

| WebArena                     | BrowserGym                                  |
|------------------------------|---------------------------------------------|
| click [id]                   | click('id')                                 |
| type [id] [content] [0|1]    | fill('id', 'content') (+ press('id', 'Enter') when 1, the default) |
| hover [id]                   | hover('id')                                 |
| press [key_comb]             | keyboard_press('Control+a')                 |
| scroll [down|up]             | scroll(0, +/-SCROLL_PX)                     |
| new_tab / close_tab          | new_tab() / tab_close()                     |
| tab_focus [i]                | tab_focus(i)                                |
| goto [url]                   | goto('url')  (only the configured sites)    |
| go_back / go_forward         | go_back() / go_forward()                    |
| stop [answer]                | ends the episode; the answer goes to the task's evaluator |

Anything else is an `ActionError` whose text says what is wrong and shows the right form.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass, field

SCROLL_PX = 600
USAGE = ("click [id], type [id] [content] [0|1], hover [id], press [key], scroll [down|up], new_tab, "
         "tab_focus [i], close_tab, goto [url], go_back, go_forward, stop [answer]")
_BID = r"[a-zA-Z]*\d+"
_PATTERNS = {
    "click": re.compile(rf"^click\s*\[\s*({_BID})\s*\]$", re.I),
    "hover": re.compile(rf"^hover\s*\[\s*({_BID})\s*\]$", re.I),
    "type": re.compile(rf"^type\s*\[\s*({_BID})\s*\]\s*\[(.*)\]\s*\[\s*([01])\s*\]$", re.I | re.S),
    "type2": re.compile(rf"^type\s*\[\s*({_BID})\s*\]\s*\[(.*)\]$", re.I | re.S),
    "press": re.compile(r"^press\s*\[\s*([^\]]+?)\s*\]$", re.I),
    "scroll": re.compile(r"^scroll\s*\[\s*(?:direction\s*=\s*)?(down|up)\s*\]$", re.I),
    "tab_focus": re.compile(r"^tab_focus\s*\[\s*(\d+)\s*\]$", re.I),
    "goto": re.compile(r"^goto\s*\[\s*(.+?)\s*\]$", re.I),
    "stop": re.compile(r"^stop\s*\[(.*)\]$", re.I | re.S),
}
_BARE = {"new_tab": "new_tab()", "close_tab": "tab_close()", "go_back": "go_back()", "go_forward": "go_forward()"}
_FORMS = {"click": "click [id]", "hover": "hover [id]", "type": "type [id] [content] [0|1]", "press": "press [key]",
          "scroll": "scroll [down|up]", "tab_focus": "tab_focus [i]", "goto": "goto [url]", "stop": "stop [answer]"}
_KEYS = {"ctrl": "Control", "control": "Control", "cmd": "Meta", "meta": "Meta", "command": "Meta", "alt": "Alt",
         "option": "Alt", "shift": "Shift", "enter": "Enter", "return": "Enter", "esc": "Escape",
         "escape": "Escape", "tab": "Tab", "backspace": "Backspace", "delete": "Delete", "del": "Delete",
         "space": "Space", "pagedown": "PageDown", "page_down": "PageDown", "pageup": "PageUp",
         "page_up": "PageUp", "home": "Home", "end": "End", "up": "ArrowUp", "down": "ArrowDown",
         "left": "ArrowLeft", "right": "ArrowRight", "arrowup": "ArrowUp", "arrowdown": "ArrowDown",
         "arrowleft": "ArrowLeft", "arrowright": "ArrowRight", "insert": "Insert",
         "controlormeta": "ControlOrMeta"}


@dataclass(frozen=True)
class BrowserAction:
    kind: str  # click | type | hover | press | scroll | new_tab | tab_focus | close_tab | goto | go_back | go_forward | stop
    calls: list[str] = field(default_factory=list)  # BrowserGym high-level calls, run in order
    answer: str = ""  # stop
    url: str = ""  # goto


@dataclass(frozen=True)
class ActionError:
    reason: str


def _key(combo: str) -> str | None:
    parts = [p.strip() for p in combo.split("+")]
    keys = []
    for part in parts:
        low = part.lower()
        if low in _KEYS:
            keys.append(_KEYS[low])
        elif len(part) == 1 or re.fullmatch(r"[fF]([1-9]|1[0-2])", part) or re.fullmatch(r"Key[A-Z]|Digit\d", part):
            keys.append(part.upper() if re.fullmatch(r"[fF]\d+", part) else part)
        else:
            return None
    return "+".join(keys) if keys and all(keys) else None


def parse_action(text: str, allowed_hosts: tuple[str, ...] = ()) -> BrowserAction | ActionError:
    """Parse one WebArena action; `allowed_hosts` limits goto (empty: any http(s) URL)."""
    action = " ".join(str(text).split()) if not str(text).lower().startswith(("type", "stop")) else str(text).strip()
    if not action:
        return ActionError(f"empty action; use one of: {USAGE}")
    name = re.split(r"[\s\[]", action, maxsplit=1)[0].lower()
    if name in _BARE:
        if action.lower() != name:
            return ActionError(f"{name} takes no argument; write just {name}")
        return BrowserAction(name, [_BARE[name]])
    if name not in _FORMS:
        return ActionError(f"'{action[:60]}' is not a browser action; use one of: {USAGE}")
    if name == "type":
        match = _PATTERNS["type"].match(action) or _PATTERNS["type2"].match(action)
        if not match:
            return ActionError(f"malformed type action; use {_FORMS['type']}, e.g. type [12] [blue kettle] [1]")
        bid, content = match.group(1), match.group(2)
        enter = match.group(3) if match.lastindex and match.lastindex >= 3 else "1"
        if "\n" in content:
            return ActionError("type content must be one line")
        calls = [f"fill({bid!r}, {content!r})"] + ([f"press({bid!r}, 'Enter')"] if enter == "1" else [])
        return BrowserAction("type", calls)
    match = _PATTERNS[name].match(action)
    if not match:
        return ActionError(f"malformed {name} action; use {_FORMS[name]}")
    arg = match.group(1)
    if name in ("click", "hover"):
        return BrowserAction(name, [f"{name}({arg!r})"])
    if name == "press":
        key = _key(arg)
        if key is None:
            return ActionError(f"unknown key '{arg[:40]}'; e.g. press [Enter], press [Ctrl+a], press [PageDown]")
        return BrowserAction(name, [f"keyboard_press({key!r})"])
    if name == "scroll":
        return BrowserAction(name, [f"scroll(0, {SCROLL_PX if arg.lower() == 'down' else -SCROLL_PX})"])
    if name == "tab_focus":
        return BrowserAction(name, [f"tab_focus({int(arg)})"])
    if name == "goto":
        parts = urllib.parse.urlsplit(arg)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return ActionError(f"goto needs a full http URL, e.g. goto [http://{(allowed_hosts or ('shop.test',))[0]}/]")
        if allowed_hosts and parts.hostname.lower() not in allowed_hosts:
            sites = ", ".join(f"http://{h}" for h in allowed_hosts)
            return ActionError(f"goto refused: the browser only visits the configured sites ({sites})")
        return BrowserAction(name, [f"goto({arg!r})"], url=arg)
    return BrowserAction("stop", [], answer=arg.strip())
