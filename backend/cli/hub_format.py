"""How ``pair model search`` and ``pair model files`` show what Hugging Face answered."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from backend.cli.engine_format import column_widths, describe_size, table_line
from backend.protocol.types.hub import HubFile, HubFiles, HubModel

SEARCH_COLUMNS = (("REPOSITORY", 40), ("DOWNLOADS", 11), ("LIKES", 7), ("UPDATED", 0))
FILE_COLUMNS = (("FILE", 40), ("QUANT", 9), ("SIZE", 10), ("", 0))
SUGGESTED_MARK = "<- suggested"


def describe_search(query: str, models: Sequence[HubModel]) -> str:
    """The repositories found, most downloaded first, and the command to see one's files."""
    if not models:
        return f"no GGUF model on Hugging Face matches '{query}'; try fewer or other words"
    rows = [
        (model.repo, f"{model.downloads:,}", f"{model.likes:,}", (model.updated or "")[:10])
        for model in models
    ]
    widths = column_widths(SEARCH_COLUMNS, rows)
    lines = [table_line([title for title, _ in SEARCH_COLUMNS], widths)]
    lines += [table_line(row, widths).rstrip() for row in rows]
    lines.append("")
    lines.append("See a repository's files and the one that fits this computer:")
    lines.append(f"  pair model files {models[0].repo}")
    return "\n".join(lines)


def describe_files(answer: HubFiles, memory_bytes: int | None) -> str:
    """The repository's GGUF models, the suggested one marked and explained, and the command
    that pulls it into llama.cpp."""
    if not answer.files:
        return f"{answer.repo} has no GGUF model file"
    rows = [_file_row(file, file.name == answer.suggested) for file in answer.files]
    widths = column_widths(FILE_COLUMNS, rows)
    lines = [table_line([title for title, _ in FILE_COLUMNS], widths).rstrip()]
    lines += [table_line(row, widths).rstrip() for row in rows]
    lines.append("")
    memory = f" ({describe_size(memory_bytes)} of memory)" if memory_bytes else ""
    suggested = next((file for file in answer.files if file.name == answer.suggested), None)
    if suggested is None:
        lines.append(f"No suggestion for this computer{memory}: {answer.reason}.")
        lines.append(f"Pull a file with: pair model pull llamacpp {_first_single_url(answer)}")
        return "\n".join(lines)
    lines.append(f"Suggested for this computer{memory}: {suggested.name}")
    lines.append(f"  {answer.reason[:1].upper()}{answer.reason[1:]}.")
    lines.append("Pull it into llama.cpp with:")
    lines.append(f"  pair model pull llamacpp {shlex.quote(suggested.url)}")
    return "\n".join(lines)


def _file_row(file: HubFile, suggested: bool) -> tuple[str, ...]:
    note = SUGGESTED_MARK if suggested else ""
    if file.parts > 1:
        note = f"split in {file.parts} files (cannot be pulled yet)"
    return (file.name, file.quant or "-", describe_size(file.size), note)


def _first_single_url(answer: HubFiles) -> str:
    single = next((file for file in answer.files if file.parts == 1), None)
    return shlex.quote(single.url) if single is not None else "URL"
