"""The alias rules as pure functions: trimmed names without spaces, no self-alias, no chains,
a bounded count."""

from __future__ import annotations

import pytest

from backend.components.aliases.rules import alias_name, check_alias, target_name
from backend.protocol.types.aliases import MAX_ALIAS_LENGTH, MAX_ALIASES


def test_a_name_is_trimmed_and_may_not_hold_spaces_or_be_empty_or_too_long() -> None:
    assert alias_name("  coder  ") == "coder"
    assert alias_name("a" * MAX_ALIAS_LENGTH) == "a" * MAX_ALIAS_LENGTH
    for bad in ("", "   ", "my coder", "tab\there", "a" * (MAX_ALIAS_LENGTH + 1), "bell\x07"):
        with pytest.raises(ValueError, match="alias"):
            alias_name(bad)


def test_a_target_is_trimmed_and_may_not_be_empty() -> None:
    assert target_name(" qwen2.5:7b ") == "qwen2.5:7b"
    with pytest.raises(ValueError, match="1-200"):
        target_name("  ")


def test_an_alias_may_not_name_itself() -> None:
    with pytest.raises(ValueError, match="may not name itself"):
        check_alias({}, "qwen", " qwen ")


def test_the_target_may_not_be_an_alias_and_the_error_says_what_to_point_at() -> None:
    pointer = r"'coder' is itself an alias .*point 'c' at 'qwen2\.5:7b'"
    with pytest.raises(ValueError, match=pointer):
        check_alias({"coder": "qwen2.5:7b"}, "c", "coder")


def test_a_name_other_aliases_stand_for_may_not_become_an_alias() -> None:
    aliases = {"coder": "qwen2.5:7b", "helper": "qwen2.5:7b"}
    with pytest.raises(ValueError, match="'coder', 'helper' stands for"):
        check_alias(aliases, "qwen2.5:7b", "llama3")


def test_an_existing_alias_may_be_pointed_elsewhere_even_at_the_limit() -> None:
    full = {f"a{index}": "model" for index in range(MAX_ALIASES)}
    assert check_alias(full, "a0", "other") == ("a0", "other")
    with pytest.raises(ValueError, match=f"at most {MAX_ALIASES}"):
        check_alias(full, "new", "model")
    assert check_alias(dict(list(full.items())[:-1]), " new ", " model ") == ("new", "model")
