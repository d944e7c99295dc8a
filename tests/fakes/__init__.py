"""Test doubles shared by the test packages (environments, warm-started policies)."""
