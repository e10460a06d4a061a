"""The markdown report of ``bench/front_door.py``: its tables from what it measured.

Every proxy path a row has (the bare pass-through, nginx where it is installed, PAIR) gets its
added latency over the direct call; PAIR's added latency is divided by the bare
pass-through's and by nginx's, each ratio with its interval over the rounds resampled.
"""

from __future__ import annotations

import math
import os
import platform
from collections.abc import Callable
from dataclasses import dataclass

from _common import LoadResult, percentile
from _front_door_rows import (
    BARE,
    CHUNK_TARGET_MS,
    DIRECT,
    INTERVAL,
    JSON,
    KINDS,
    LEVELS,
    NGINX,
    NGINX_TARGET,
    PAIR,
    PIN_LEVEL,
    RATIO_TARGET,
    RESAMPLES,
    ROUNDS,
    STREAM,
    Findings,
    Interval,
    Row,
    added_ms,
    chunk_added,
    ratio,
    ratio_intervals,
)

from backend.workers.event_loop import loop_name


@dataclass(frozen=True)
class RunFacts:
    """How the run went, for the report's header."""

    idle_rss: int
    cpu: set[int]
    quick: bool
    seconds: float
    load_before: float
    load_during: float  # at the end of the last round, before any background load stopped
    policy: str
    twin: str | None  # the pass-through script in PAIR's place (--twin, --floor), or None
    background_load: int
    nginx_missing: str  # why there is no nginx row, or ""


def ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f}"


def added_pair(via: list[float], direct: list[float]) -> str:
    """Added p50 / p99 of ``via`` over ``direct``."""
    return f"{ms(added_ms(via, direct, 0.5))} / {ms(added_ms(via, direct, 0.99))}"


def proxies(row: Row) -> list[str]:
    """The row's paths other than the direct call, in report order."""
    return [path for path in (BARE, NGINX, PAIR) if path in row]


def ratio_cell(value: float, interval: Interval, target: float, under: str) -> str:
    if math.isnan(value):
        return f"n/a ({under} adds <= 0)"
    cell = f"**{value:.2f}x**" if value > target else f"{value:.2f}x"
    low, high = interval
    if math.isnan(low):
        return cell
    # "to", not a dash: either end may be negative (a draw where PAIR added less than nothing).
    return f"{cell} ({low:.2f} to {high:.2f})"


def over_target(ratios: dict[str, float], intervals: dict[str, Interval]) -> str:
    """The percentiles whose PAIR/bare ratio misses the target, bold; ``ok`` or ``n/a``
    otherwise; and which verdicts the rounds measured could turn (the target inside the
    interval)."""
    over = [name for name, value in ratios.items() if value > RATIO_TARGET]
    verdict = f"**over: {', '.join(over)}**" if over else "ok"
    if not over and all(math.isnan(value) for value in ratios.values()):
        return "n/a"
    unsure = [name for name, (low, high) in intervals.items() if low <= RATIO_TARGET < high]
    return f"{verdict} (within the interval: {', '.join(unsure)})" if unsure else verdict


def main_row(findings: Findings, kind: str, level: int, row: Row, rounds: list[Row]) -> str:
    d = row[DIRECT].latencies
    unders = [path for path in (BARE, NGINX) if path in row]
    intervals = ratio_intervals(rounds, [(PAIR, under) for under in unders])
    cells = [findings.backend.label, findings.backend.kind_label(kind), str(level)]
    cells += [
        str(len(row[PAIR].latencies)),
        f"{ms(percentile(d, 0.5))} / {ms(percentile(d, 0.99))}",
    ]
    cells += [added_pair(row[path].latencies, d) for path in proxies(row)]
    bare_ratios: dict[str, float] = {}
    bare_intervals: dict[str, Interval] = {}
    for under in unders:
        target = RATIO_TARGET if under == BARE else NGINX_TARGET
        for name, fraction in (("p50", 0.5), ("p99", 0.99)):
            value = ratio(
                added_ms(row[PAIR].latencies, d, fraction),
                added_ms(row[under].latencies, d, fraction),
            )
            interval = intervals[(PAIR, under, fraction)]
            cells.append(ratio_cell(value, interval, target, under))
            if under == BARE:
                bare_ratios[name], bare_intervals[name] = value, interval
    cells.append(" / ".join(f"{row[path].rate:.0f}" for path in (DIRECT, *proxies(row))))
    cells.append(over_target(bare_ratios, bare_intervals))
    return f"| {' | '.join(cells)} |"


def main_table(all_findings: list[Findings], with_nginx: bool) -> list[str]:
    nginx_added = "| nginx added p50 / p99 " if with_nginx else ""
    nginx_ratios = "| PAIR/nginx p50 | PAIR/nginx p99 " if with_nginx else ""
    lines = [
        "| engine | request | c | n | direct p50 / p99 | bare added p50 / p99 "
        f"{nginx_added}| PAIR added p50 / p99 | PAIR/bare p50 | PAIR/bare p99 {nginx_ratios}"
        f"| req/s direct / bare{' / nginx' if with_nginx else ''} / PAIR "
        f"| PAIR/bare <= {RATIO_TARGET:g}x |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|"
        + ("--:|--:|--:|" if with_nginx else "")
        + "--:|---|",
    ]
    for findings in all_findings:
        for kind in KINDS:
            for level in LEVELS:
                row = findings.rows.get((kind, level))
                if row is not None:
                    rounds = findings.rounds[(kind, level)]
                    lines.append(main_row(findings, kind, level, row, rounds))
    return lines


def per_path(row: Row | None, pick: Callable[[LoadResult], list[float]]) -> str:
    """Each proxy minus direct, p50 / p99, of the samples ``pick`` takes from each result."""
    if row is None:
        return "n/a"
    d = pick(row[DIRECT])
    return "; ".join(f"{path} {added_pair(pick(row[path]), d)}" for path in proxies(row))


def cpu_per_request(result: LoadResult, seconds: float) -> float:
    """CPU milliseconds per measured request of ``seconds`` spent over ``result``'s run."""
    return seconds * 1000 / len(result.latencies) if result.latencies else math.nan


def cpu_cells(plain: Row) -> str:
    """CPU per request of each proxy's serving process (and of PAIR's broker)."""
    each = [f"{cpu_per_request(plain[path], plain[path].cpu_s):.3f}" for path in proxies(plain)]
    pair = plain[PAIR]
    pair_cpu = cpu_per_request(pair, pair.cpu_s)
    broker_cpu = cpu_per_request(pair, pair.side_cpu_s)
    return (
        f"{' / '.join(each)} + {broker_cpu:.3f} ms "
        f"(PAIR: {1000 / pair_cpu:.0f} req/s per busy core)"
    )


def extras_row(findings: Findings, idle_rss: int) -> str:
    stream, plain = findings.rows.get((STREAM, 1)), findings.rows.get((JSON, PIN_LEVEL))
    rates = cpu_cost = "n/a"
    if plain is not None:
        pinned_rate = f"{findings.pinned.rate:.0f}" if findings.pinned is not None else "n/a"
        paths = (DIRECT, *proxies(plain))
        rates = " / ".join([*(f"{plain[path].rate:.0f}" for path in paths), pinned_rate])
        cpu_cost = cpu_cells(plain)
    cells = [
        findings.backend.label,
        per_path(stream, lambda result: result.first_chunks) + " ms",
        chunk_cells(stream),
        rates,
        cpu_cost,
        f"{idle_rss / 2**20:.1f} / {findings.rss_peak / 2**20:.1f} MB",
    ]
    return f"| {' | '.join(cells)} |"


def chunk_cells(row: Row | None) -> str:
    """Each proxy's per-chunk added delay, p50 / p99."""
    if row is None:
        return "n/a"
    return (
        "; ".join(
            f"{path} {ms(chunk_added(row, path, 0.5))} / {ms(chunk_added(row, path, 0.99))}"
            for path in proxies(row)
        )
        + " ms"
    )


def extras_table(all_findings: list[Findings], facts: RunFacts) -> list[str]:
    cpu = ",".join(map(str, sorted(facts.cpu)))
    proxies_named = f"bare{' / nginx' if not facts.nginx_missing else ''}"
    lines = [
        "| engine | first-chunk added p50 / p99 (c=1 stream) "
        "| per-chunk added p50 / p99 (how late each chunk after the first comes, "
        "vs direct; c=1 stream) "
        f"| req/s JSON c={PIN_LEVEL}: direct / {proxies_named} / PAIR / PAIR, worker pinned "
        f"to CPU {cpu} "
        f"| CPU per request, JSON c={PIN_LEVEL}: {proxies_named} / PAIR worker + its broker "
        f"(job events) | PAIR worker RSS idle / peak at c={max(LEVELS)} |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    lines += [extras_row(findings, facts.idle_rss) for findings in all_findings]
    return lines


def chunk_target(all_findings: list[Findings]) -> list[str]:
    """PAIR's (and the other proxies') per-chunk added delay p99 at every concurrency."""
    lines = []
    for findings in all_findings:
        cells = []
        for level in LEVELS:
            row = findings.rows.get((STREAM, level))
            if row is None:
                continue
            pair_p99 = chunk_added(row, PAIR, 0.99)
            verdict = "**over**" if pair_p99 > CHUNK_TARGET_MS else "ok"
            others = ", ".join(
                f"{path} {ms(chunk_added(row, path, 0.99))} ms"
                for path in proxies(row)
                if path != PAIR
            )
            cells.append(f"c={level} {ms(pair_p99)} ms {verdict} ({others})")
        lines.append(
            f"- {findings.backend.label}, PAIR per-chunk added delay p99 "
            f"(target <= {CHUNK_TARGET_MS:g} ms): {'; '.join(cells)}"
        )
    return lines


def p50_p99(samples: list[float]) -> str:
    return f"{ms(percentile(samples, 0.5))} / {ms(percentile(samples, 0.99))}"


def stream_detail(all_findings: list[Findings]) -> list[str]:
    lines = []
    for findings in all_findings:
        for level in LEVELS:
            row = findings.rows.get((STREAM, level))
            if row is None:
                continue
            each = [(path, row[path]) for path in (DIRECT, *proxies(row))]
            lines.append(
                f"- {findings.backend.label}, stream c={level}, p50 / p99 ms: first chunk "
                + ", ".join(f"{path} {p50_p99(r.first_chunks)}" for path, r in each)
                + "; inter-chunk gap "
                + ", ".join(f"{path} {p50_p99(r.gaps)}" for path, r in each)
                + " ("
                + " / ".join(str(r.chunks) for _, r in each)
                + " chunks); slowest request "
                + ", ".join(f"{path} {ms(max(r.latencies, default=math.nan))}" for path, r in each)
            )
    return lines


def header(facts: RunFacts) -> str:
    nginx = (
        f"nginx rows skipped: {facts.nginx_missing}. "
        if facts.nginx_missing
        else "nginx: one worker, keep-alive to the engine, no buffering. "
    )
    background = (
        f"{facts.background_load} busy background processes (CPU spin, default niceness) ran "
        f"during the rounds; load average {facts.load_during:.1f} at the end of the rounds. "
        if facts.background_load
        else f"No background load; load average {facts.load_during:.1f} at the end of the rounds. "
    )
    return (
        f"Front door vs a bare pass-through vs direct: {platform.python_implementation()} "
        f"{platform.python_version()}, {os.cpu_count()} CPUs, load average "
        f"{facts.load_before:.1f} before and {os.getloadavg()[0]:.1f} after, "
        f"{facts.seconds:.0f} s{' (--quick)' if facts.quick else ''}. {background}{nginx}"
        "Latencies in ms, closed-loop clients; added = path - direct, per percentile; PAIR/bare "
        "and PAIR/nginx = PAIR's added over the other's (n/a when the other's is <= 0; bold when "
        f"over {RATIO_TARGET:g}x of bare or {NGINX_TARGET:g}x of nginx), in brackets the "
        f"{INTERVAL[0] * 100:g}th-{INTERVAL[1] * 100:g}th percentile of that ratio over "
        f"{RESAMPLES} resamplings of the rounds; n = measured requests per path, in {ROUNDS} "
        f"rounds (direct, bare, {'' if facts.nginx_missing else 'nginx, '}PAIR; then reversed), "
        "pooled. "
        + (
            (
                "CALIBRATION: every PAIR column is a second bare pass-through."
                if facts.twin == "_pass_through.py"
                else "FLOOR: every PAIR column is the Python floor (bench/_raw_floor.py: uvloop "
                "and httptools, no framework, no routing, no jobs)."
            )
            if facts.twin
            else f"PAIR's worker runs on {loop_name()}'s event loop (PAIR_EVENT_LOOP) as a "
            f"{facts.policy} task (PAIR_CPU_POLICY), the bare pass-through on asyncio's as a "
            "normal one."
        )
    )


def report(all_findings: list[Findings], facts: RunFacts) -> None:
    """Print the whole report to stdout."""
    print(header(facts))
    print()
    print("\n".join(main_table(all_findings, with_nginx=not facts.nginx_missing)))
    print()
    print("\n".join(extras_table(all_findings, facts)))
    print()
    print("\n".join(chunk_target(all_findings)))
    print()
    print("\n".join(stream_detail(all_findings)))
    failures = sum(result.errors for findings in all_findings for result in findings.results())
    if failures:
        print(f"\n{failures} requests failed (see stderr); they are not in the figures.")
