"""``pair model alias NAME TARGET``, ``--remove NAME`` and ``pair model aliases``: what each
asks the broker, what it prints, and the usage and broker errors."""

from __future__ import annotations

import msgspec
import pytest

from backend.cli import exit_codes, main
from backend.cli.alias_commands import format_aliases
from backend.protocol import errors, methods
from backend.protocol.types.aliases import ModelAlias
from tests.unit.cli.scripted import StreamingBroker

CODER = ModelAlias(name="coder", target="qwen2.5-coder:7b", created_at=1000.0)
LONG = ModelAlias(name="a-much-longer-alias", target="llama3", created_at=1000.0 - 7200)


@pytest.fixture
def broker(monkeypatch: pytest.MonkeyPatch) -> StreamingBroker:
    broker = StreamingBroker()
    broker.attach(monkeypatch)
    return broker


def test_alias_sets_the_name_and_says_what_it_reaches(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.answer(methods.MODELS_ALIAS_SET.name, CODER)
    assert main.main(["model", "alias", "coder", "qwen2.5-coder:7b"]) == exit_codes.OK
    assert broker.calls == [
        (methods.MODELS_ALIAS_SET.name, {"name": "coder", "target": "qwen2.5-coder:7b"})
    ]
    assert capsys.readouterr().out == (
        "coder now reaches qwen2.5-coder:7b at this computer's front doors.\n"
    )


def test_alias_remove_forgets_it(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.answer(methods.MODELS_ALIAS_REMOVE.name, CODER)
    assert main.main(["model", "alias", "--remove", "coder"]) == exit_codes.OK
    assert broker.calls == [(methods.MODELS_ALIAS_REMOVE.name, {"name": "coder"})]
    assert "Removed the alias coder (it stood for qwen2.5-coder:7b)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv", [["model", "alias", "coder"], ["model", "alias", "--remove", "coder", "qwen"]]
)
def test_a_missing_target_or_a_target_with_remove_is_a_usage_error(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert main.main(argv) == exit_codes.USAGE
    assert broker.calls == []
    assert "pair model alias NAME TARGET" in capsys.readouterr().err


def test_a_refused_alias_prints_the_brokers_reason(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    refusal = errors.InvalidParams("Invalid params for models:alias-set: 'c' is itself an alias")
    broker.answer(methods.MODELS_ALIAS_SET.name, refusal)
    assert main.main(["model", "alias", "x", "c"]) == exit_codes.ERROR
    assert "'c' is itself an alias" in capsys.readouterr().err


def test_aliases_prints_a_table_or_json(
    broker: StreamingBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    broker.answer(methods.MODELS_ALIASES.name, [LONG, CODER])
    assert main.main(["model", "aliases"]) == exit_codes.OK
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == ["NAME", "TARGET", "SET"]
    assert [row.split()[:2] for row in rows] == [
        ["a-much-longer-alias", "llama3"],
        ["coder", "qwen2.5-coder:7b"],
    ]
    assert main.main(["model", "aliases", "--json"]) == exit_codes.OK
    printed = msgspec.json.decode(capsys.readouterr().out, type=list[ModelAlias])
    assert printed == [LONG, CODER]


def test_the_table_lines_up_and_says_how_long_ago_and_an_empty_list_says_how_to_add() -> None:
    header, long_row, coder_row = format_aliases([LONG, CODER], now=1000.0 + 30).splitlines()
    assert header.index("TARGET") == long_row.index("llama3") == coder_row.index("qwen")
    assert long_row.endswith("2 h ago") and coder_row.endswith("just now")
    assert format_aliases([CODER], now=1000.0 + 600).endswith("10 min ago")
    assert format_aliases([], now=0.0) == (
        "No model aliases. Add one with `pair model alias NAME TARGET`."
    )
