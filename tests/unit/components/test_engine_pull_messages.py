"""A pull that cannot happen says why in words and names the next command: an engine not
installed or not running, a model split in several files, a request without a URL."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from backend.components.engines.actions import not_running
from backend.components.engines.controller import EngineController
from backend.components.engines.store_actions import pull_source
from backend.protocol import errors

HUB = "https://huggingface.co/unsloth/Qwen2.5-72B-Instruct-GGUF/resolve/main"


def _engine(*, installed: bool) -> EngineController:
    fake: Any = SimpleNamespace(
        name="ollama",
        manifest=SimpleNamespace(display_name="Ollama"),
        status=lambda: SimpleNamespace(installed=installed),
    )
    return cast(EngineController, fake)


def test_an_engine_not_installed_names_the_install_command() -> None:
    assert not_running(_engine(installed=False)) == (
        "Ollama is not installed; install it with `pair engine install ollama`"
    )


def test_an_engine_installed_but_stopped_names_the_start_command() -> None:
    assert not_running(_engine(installed=True)) == (
        "Ollama is not running; start it with `pair engine start ollama`"
    )


@pytest.mark.parametrize(
    ("model", "url"),
    [
        (f"{HUB}/Q8_0/Qwen2.5-72B-Instruct-Q8_0-00001-of-00002.gguf", None),
        ("qwen72", f"{HUB}/BF16/Qwen2.5-72B-Instruct-BF16-00002-of-00003.gguf"),
    ],
)
def test_a_part_of_a_split_model_is_refused_before_any_download(
    model: str, url: str | None
) -> None:
    with pytest.raises(errors.InvalidParams) as caught:
        pull_source(model, url)
    assert "of a model split in" in caught.value.message
    assert "choose a single-file quantization" in caught.value.message


def test_a_single_file_url_pulls_under_its_stem() -> None:
    url = f"{HUB}/Qwen2.5-72B-Instruct-Q4_K_M.gguf"
    assert pull_source(url, None) == ("Qwen2.5-72B-Instruct-Q4_K_M", url)
    assert pull_source(None, f"{HUB}/m-00001-of-00001.gguf")[0] == "m-00001-of-00001"


def test_a_pull_without_a_url_names_the_one_pull_syntax_without_internals() -> None:
    with pytest.raises(errors.InvalidParams) as caught:
        pull_source("tiny", None)
    assert "`pair model pull ENGINE URL`" in caught.value.message
    assert not caught.value.message.startswith("Invalid params")
