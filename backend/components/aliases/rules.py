"""The rules an alias must follow (pure): a trimmed name without spaces, no alias of itself,
no chains, and a bounded count, so a routing table resolves any alias in one look-up."""

from __future__ import annotations

from collections.abc import Mapping

from backend.protocol.types.aliases import MAX_ALIAS_LENGTH, MAX_ALIASES


def alias_name(text: str) -> str:
    """``text`` as an alias's name: 1-200 printable characters once trimmed, no whitespace
    inside; ``ValueError`` else."""
    name = text.strip()
    if not 1 <= len(name) <= MAX_ALIAS_LENGTH:
        raise ValueError(f"an alias is 1-{MAX_ALIAS_LENGTH} characters")
    if any(character.isspace() for character in name) or not name.isprintable():
        raise ValueError(f"an alias has no spaces or control characters: {name!r}")
    return name


def target_name(text: str) -> str:
    """``text`` as the model an alias stands for: 1-200 printable characters once trimmed."""
    target = text.strip()
    if not 1 <= len(target) <= MAX_ALIAS_LENGTH or not target.isprintable():
        raise ValueError(f"the model's name is 1-{MAX_ALIAS_LENGTH} printable characters")
    return target


def check_alias(aliases: Mapping[str, str], name: str, target: str) -> tuple[str, str]:
    """``(name, target)`` checked against the existing ``aliases`` (name to target);
    ``ValueError`` saying which rule it breaks. Setting an existing name points it elsewhere."""
    name, target = alias_name(name), target_name(target)
    if name == target:
        raise ValueError(f"an alias may not name itself ({name!r})")
    if target in aliases:
        raise ValueError(
            f"{target!r} is itself an alias (of {aliases[target]!r}); "
            f"point {name!r} at {aliases[target]!r} instead"
        )
    users = sorted(other for other, to in aliases.items() if to == name)
    if users:
        raise ValueError(
            f"{name!r} is the model that {', '.join(repr(user) for user in users)} stands for;"
            " an alias may not hide it"
        )
    if name not in aliases and len(aliases) >= MAX_ALIASES:
        raise ValueError(f"at most {MAX_ALIASES} aliases; remove one first")
    return name, target
