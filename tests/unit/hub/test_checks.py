"""Bad input to hub:search and hub:files is refused with a clear invalid-params error."""

from __future__ import annotations

import pytest

from backend.components.hub.rpc import checked_query, checked_repo
from backend.protocol import errors, methods
from backend.protocol.types.hub import HubQuery, HubRepoQuery


def test_a_query_is_trimmed() -> None:
    assert checked_query(HubQuery(query="  qwen 0.5b ")) == "qwen 0.5b"


@pytest.mark.parametrize(
    ("query", "limit", "message"),
    [
        ("   ", 20, "type some words of a model's name"),
        ("x" * 201, 20, "the search is 201 characters long; use at most 200"),
        ("qwen", 0, "ask for 1 to 100 repositories, not 0"),
        ("qwen", 101, "ask for 1 to 100 repositories, not 101"),
    ],
)
def test_a_bad_search_is_invalid_params(query: str, limit: int, message: str) -> None:
    with pytest.raises(errors.InvalidParams, match=message):
        checked_query(HubQuery(query=query, limit=limit))


@pytest.mark.parametrize(
    "repo", ["Qwen/Qwen2.5-0.5B-Instruct-GGUF", " bartowski/Llama-3.2-1B-Instruct-GGUF ", "a_b/c.d"]
)
def test_owner_slash_name_is_a_repository(repo: str) -> None:
    assert checked_repo(HubRepoQuery(repo=repo)) == repo.strip()


@pytest.mark.parametrize(
    "repo", ["", "qwen", "a/b/c", "../etc", "a/..", "-a/b", "a/b?x=1", "https://huggingface.co/a/b"]
)
def test_anything_else_is_invalid_params_naming_the_form(repo: str) -> None:
    with pytest.raises(errors.InvalidParams, match="write it as owner/name"):
        checked_repo(HubRepoQuery(repo=repo))


def test_a_memory_size_must_be_positive() -> None:
    with pytest.raises(errors.InvalidParams, match="must be positive"):
        checked_repo(HubRepoQuery(repo="a/b", memory_bytes=0))


def test_params_of_the_wrong_type_are_invalid_params() -> None:
    with pytest.raises(errors.InvalidParams, match="hub:search"):
        methods.HUB_SEARCH.convert_params({"query": 5})
