"""The port flags of ``pair node`` and ``pair engine set-port`` take the range the door-port
settings and the app's engine fields take, 1024-65535, and say so when refused."""

from __future__ import annotations

import pytest

from backend.cli.main import build_parser


@pytest.mark.parametrize(
    "argv",
    [
        ["node", "--ollama-port", "80"],
        ["node", "--node-port", "1023"],
        ["node", "--relay-port", "65536"],
        ["engine", "set-port", "llamacpp", "443"],
    ],
)
def test_a_port_outside_the_settings_range_is_refused_naming_it(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as refused:
        build_parser().parse_args(argv)
    assert refused.value.code == 2
    assert "is outside 1024-65535" in capsys.readouterr().err


def test_the_lowest_and_highest_ports_of_the_range_are_taken() -> None:
    args = build_parser().parse_args(["node", "--ollama-port", "1024", "--openai-port", "65535"])
    assert (args.ollama_port, args.openai_port) == (1024, 65535)
