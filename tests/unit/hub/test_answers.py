"""Hugging Face's answers read into wire types, from the emulator's recorded answers."""

from __future__ import annotations

import json

import pytest

from backend.components.hub.answers import AnswerError, download_url, parse_search, parse_tree
from backend.devtools.emulators.hub import recorded_answers

BASE = "http://hub.test"


def _tree(repo: str) -> bytes:
    return json.dumps(recorded_answers().trees[repo]).encode()


def test_a_search_answer_gives_repositories_in_its_order() -> None:
    models = parse_search(json.dumps(recorded_answers().search).encode())
    first = models[0]
    assert first.repo == "Qwen/Qwen2.5-0.5B-Instruct-GGUF"
    assert (first.downloads, first.likes, first.pipeline) == (86211, 117, "text-generation")
    assert first.updated == "2024-09-17T14:08:42.000Z"  # createdAt when lastModified is absent
    assert models[2].pipeline is None


def test_lastmodified_is_the_update_time_when_given() -> None:
    body = b'[{"id": "a/b", "lastModified": "2025-01-02T00:00:00.000Z", "createdAt": "2024"}]'
    assert parse_search(body)[0].updated == "2025-01-02T00:00:00.000Z"


def test_a_tree_lists_gguf_models_smallest_first_with_their_lfs_size_and_url() -> None:
    files = parse_tree(_tree("Qwen/Qwen2.5-0.5B-Instruct-GGUF"), "Qwen/x", BASE)
    assert [file.quant for file in files][:3] == ["Q2_K", "Q4_0", "Q3_K_M"]
    assert all(file.name.endswith(".gguf") for file in files)  # README, LICENSE left out
    assert files[0].size == 415_012_345
    assert files[0].url == f"{BASE}/Qwen/x/resolve/main/qwen2.5-0.5b-instruct-q2_k.gguf"


def test_split_parts_are_one_model_named_by_its_first_part_with_the_total_size() -> None:
    files = parse_tree(_tree("unsloth/Qwen2.5-72B-Instruct-GGUF"), "u/q", BASE)
    by_name = {file.name: file for file in files}
    q8 = by_name["Q8_0/Qwen2.5-72B-Instruct-Q8_0-00001-of-00002.gguf"]
    assert (q8.parts, q8.size, q8.quant) == (2, 39706547520 + 37556016128, "Q8_0")
    bf16 = by_name["BF16/Qwen2.5-72B-Instruct-BF16-00001-of-00003.gguf"]
    assert (bf16.parts, bf16.quant) == (3, "BF16")
    assert len(files) == 4  # two single files, two split models


def test_a_split_model_without_its_first_part_is_left_out() -> None:
    body = json.dumps([{"type": "file", "path": "m-00002-of-00002.gguf", "size": 5}]).encode()
    assert parse_tree(body, "a/b", BASE) == []


def test_a_path_with_spaces_is_quoted_in_its_url() -> None:
    assert download_url(BASE + "/", "a/b", "dir/my model.gguf").endswith("dir/my%20model.gguf")


@pytest.mark.parametrize("body", [b"{}", b"not json", b'[{"downloads": 1}]'])
def test_an_answer_of_another_shape_is_an_answer_error(body: bytes) -> None:
    with pytest.raises(AnswerError, match="is not what Hugging Face sends"):
        parse_search(body)
