"""`python -m evoharness_rl <command> [overrides]` (same as the `evoharness-rl` script)."""

from evoharness_rl.cli import main

if __name__ == "__main__":
    main()
