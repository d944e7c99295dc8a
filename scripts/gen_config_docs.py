"""Regenerate docs/config.md from the typed config schema (evoharness_rl/config.py).

    python scripts/gen_config_docs.py          # write docs/config.md
    python scripts/gen_config_docs.py --check  # exit 1 if docs/config.md is stale
"""

from __future__ import annotations

import sys
from pathlib import Path

from evoharness_rl.config import Config, iter_field_docs

HEADER = """# Configuration reference

Generated from `evoharness_rl/config.py` by `scripts/gen_config_docs.py`; do not edit by hand.
Override any field on the command line (`evoharness-rl eval env.max_steps_eval=30`) or pick a
group file under `configs/` (`env=webshop`, `policy=vllm`, `harness=always_on`, ...).

| field | default | meaning |
|---|---|---|
"""


def render() -> str:
    rows = []
    for name, default, doc in iter_field_docs(Config):
        shown = "(set by configs/config.yaml)" if default == "???" else f"`{default!r}`"
        rows.append(f"| `{name}` | {shown} | {doc.replace('|', '/')} |")
    return HEADER + "\n".join(rows) + "\n"


def main() -> int:
    path = Path(__file__).resolve().parents[1] / "docs" / "config.md"
    text = render()
    if "--check" in sys.argv:
        if not path.exists() or path.read_text() != text:
            print(f"{path} is stale; run: python scripts/gen_config_docs.py", file=sys.stderr)
            return 1
        return 0
    path.write_text(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
