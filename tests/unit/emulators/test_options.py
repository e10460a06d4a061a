"""Request parsing of the engine emulators: Ollama options and OpenAI field mapping."""

from __future__ import annotations

import pytest

from backend.devtools.emulators.options import (
    GenerationOptions,
    RequestError,
    include_usage,
    openai_options,
    openai_stop,
    parse_json_object,
    parse_ollama_options,
)


def test_emulator_reads_ollama_options_like_options_from_map() -> None:
    options = parse_ollama_options(
        {
            "num_predict": 5.0,
            "seed": 3,
            "stop": ["\n"],
            "num_ctx": 8192,
            "temperature": 0,
            "mirostat_unknown": "ignored",
            "top_k": None,
        }
    )
    assert options == GenerationOptions(5, 3, ("\n",), 8192, 0.0)
    assert parse_ollama_options(None) == GenerationOptions()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_predict": "5"}, 'option "num_predict" must be of type integer'),
        ({"temperature": "hot"}, 'option "temperature" must be of type float32'),
        ({"use_mmap": 1}, 'option "use_mmap" must be of type boolean'),
        ({"stop": "x"}, 'option "stop" must be of type array'),
        ({"stop": [1]}, 'option "stop" must be of an array of strings'),
        ({"seed": True}, 'option "seed" must be of type integer'),
    ],
)
def test_emulator_rejects_mistyped_ollama_options(options: dict[str, object], message: str) -> None:
    with pytest.raises(RequestError) as error:
        parse_ollama_options(options)
    assert str(error.value) == message


def test_emulator_maps_openai_fields_to_generation_options() -> None:
    body = {"max_tokens": 7, "seed": 1, "stop": "END"}
    assert openai_options(body, default_temperature=1.0) == GenerationOptions(
        7, 1, ("END",), None, 1.0
    )
    assert openai_options({"max_completion_tokens": 4}, default_temperature=None).num_predict == 4
    assert openai_stop(["a", 3, "b"]) == ("a", "b") and openai_stop(None) == ()
    assert include_usage({"stream_options": {"include_usage": True}})
    assert not include_usage({"stream_options": None})


def test_emulator_body_parsing_uses_ollama_messages() -> None:
    with pytest.raises(RequestError, match="missing request body"):
        parse_json_object(b"  ")
    with pytest.raises(RequestError):
        parse_json_object(b"{nope")
    with pytest.raises(RequestError):
        parse_json_object(b"[1]")
    assert parse_json_object(b'{"model": "m"}') == {"model": "m"}
