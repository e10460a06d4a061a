"""The suggested file: the largest that fits, Q4_K_M when nearly as large, or why none."""

from __future__ import annotations

from backend.components.hub.suggest import suggest_file
from backend.protocol.types.hub import HubFile

GB = 1_000_000_000


def _file(name: str, size: float, quant: str | None = None, parts: int = 1) -> HubFile:
    return HubFile(name=name, size=int(size), quant=quant, url=f"http://x/{name}", parts=parts)


FILES = [
    _file("m-Q2_K.gguf", 3.0 * GB, "Q2_K"),
    _file("m-Q4_K_M.gguf", 4.9 * GB, "Q4_K_M"),
    _file("m-Q5_K_M.gguf", 5.3 * GB, "Q5_K_M"),
    _file("m-Q8_0.gguf", 8.1 * GB, "Q8_0"),
    _file("m-F16.gguf", 15.2 * GB, "F16"),
]


def test_the_largest_that_fits_in_80_percent_of_memory_is_suggested() -> None:
    suggestion = suggest_file(FILES, 12 * GB)  # 9.6 GB of room: Q8_0
    assert suggestion.name == "m-Q8_0.gguf"
    assert suggestion.reason.startswith("Q8_0 (8.1 GB) is the largest that fits in 80% of 12.0")


def test_q4_k_m_is_preferred_when_the_largest_that_fits_is_nearly_as_large() -> None:
    suggestion = suggest_file(FILES, 7 * GB)  # 5.6 GB of room: Q5_K_M, Q4_K_M within 10%
    assert suggestion.name == "m-Q4_K_M.gguf"
    assert "nearly as large as Q5_K_M" in suggestion.reason


def test_q4_k_m_is_not_preferred_over_a_much_larger_file() -> None:
    assert suggest_file(FILES, 11 * GB).name == "m-Q8_0.gguf"  # Q4_K_M is 40% smaller


def test_a_file_of_exactly_80_percent_fits_and_one_byte_more_does_not() -> None:
    files = [_file("a-Q8_0.gguf", 8 * GB, "Q8_0"), _file("b-Q2_K.gguf", 1 * GB, "Q2_K")]
    assert suggest_file(files, 10 * GB).name == "a-Q8_0.gguf"
    files[0] = _file("a-Q8_0.gguf", 8 * GB + 1, "Q8_0")
    assert suggest_file(files, 10 * GB).name == "b-Q2_K.gguf"


def test_when_nothing_fits_the_smallest_and_the_memory_it_needs_are_named() -> None:
    suggestion = suggest_file(FILES, 2 * GB)
    assert suggestion.name is None
    assert suggestion.reason == (
        "none fits in 2.0 GB of memory: the smallest, m-Q2_K.gguf (3.0 GB), needs about 3.8 GB"
    )


def test_sizes_below_a_gigabyte_read_in_megabytes() -> None:
    files = [_file("m-Q4_K_M.gguf", 491_400_032, "Q4_K_M")]
    assert suggest_file(files, 300_000_000).reason == (
        "none fits in 300.0 MB of memory: the smallest, m-Q4_K_M.gguf (491.4 MB), needs about "
        "614.3 MB"
    )


def test_without_memory_nothing_is_suggested_and_the_reason_says_so() -> None:
    assert suggest_file(FILES, None).name is None
    assert "no memory size was given" in suggest_file(FILES, None).reason


def test_split_models_and_projectors_are_never_suggested() -> None:
    files = [
        _file("big-Q8_0-00001-of-00002.gguf", 2 * GB, "Q8_0", parts=2),
        _file("mmproj-F16.gguf", 0.5 * GB, "F16"),
        _file("small-Q4_0.gguf", 1 * GB, "Q4_0"),
    ]
    assert suggest_file(files, 100 * GB).name == "small-Q4_0.gguf"
    only_split = suggest_file(files[:1], 100 * GB)
    assert only_split.name is None and "split in several files" in only_split.reason
    assert suggest_file([], 100 * GB).reason == "the repository has no GGUF model file"
