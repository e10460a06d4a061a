"""A soak: three paired PAIR nodes under mixed traffic and chaos, then an audit.

    .venv/bin/python bench/soak.py [--duration 120] [--concurrency 6] [--seed N] [--root DIR]
                                   [--netns]

Starts three real ``pair node`` brokers (temporary data dirs, free ports, mDNS off), each with
PAIR's Ollama emulator as an engine it owns, pairs them with PINs and links them by address
(``bench/_soak_cluster.py``). For ``--duration`` seconds closed-loop clients send Ollama
``/api/chat`` and ``/api/generate`` and OpenAI ``/v1/chat/completions`` requests, streamed and
not, through every node's front door, about half with the official ``ollama`` and ``openai``
clients and the rest with raw aiohttp (``bench/_soak_traffic.py``), for models on that node, on
another node or on all three. Every 20-40 s one act of chaos (``bench/_soak_chaos.py``): an
engine killed with SIGKILL (its broker restarts it), a proxy worker killed with SIGKILL (its
broker restarts it), or node b or c stopped and started again. With ``--netns`` (root and
``ip netns``) each node runs in a network namespace of its own on a bridge, and the chaos also
breaks a node's link for 3-8 s (a blackhole route towards another node, or the link set down;
``bench/_soak_netns.py``), after which the node must be routable again.

Then it audits and prints (``bench/_soak_audit.py``): requests sent, answered OK, failed with a
clear error, unanswered or hung (must be 0), answered with an unclear error (must be 0); every
job each broker keeps is terminal (``jobs:get-initial``); the RSS and open descriptors of
each broker and worker, first-quarter vs last-quarter medians (flagged above ``--max-growth``);
chaos the product did not recover from; brokers that exited on their own. The last line is
``SOAK-AUDIT {json}``. Exit status 0 when every check passed, 1 when one failed, 2 when the
cluster could not be started, 130 when interrupted. Every process it started is stopped, by PID;
the data dirs are removed unless ``--root`` was given or a check failed (then kept for the logs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._soak_audit import (  # noqa: E402
    Growth,
    JobsAudit,
    LogFindings,
    Resources,
    audit_jobs,
    megabytes,
    scan_log,
    view_differences,
)
from bench._soak_chaos import Chaos, ChaosEvent  # noqa: E402
from bench._soak_cluster import NODE_NAMES, Cluster, ClusterError  # noqa: E402
from bench._soak_netns import SoakNetwork  # noqa: E402
from bench._soak_traffic import Ledger, Traffic  # noqa: E402

AUDIT_PREFIX = "SOAK-AUDIT "


@dataclass(frozen=True)
class Options:
    """What the soak was asked for."""

    duration: float
    concurrency: int
    chaos_every: tuple[float, float]
    hang_after: float
    max_growth: float
    settle: float
    seed: int
    root: Path | None
    chaos: bool
    netns: bool = False


@dataclass
class Findings:
    """Everything the audit looks at."""

    ledger: Ledger
    events: list[ChaosEvent]
    jobs: list[JobsAudit]
    growth: list[Growth]
    logs: list[LogFindings]
    unexpected_exits: list[str]
    elapsed: float


async def soak(options: Options, root: Path) -> Findings:
    """Bring the cluster up, run traffic and chaos for the duration, audit; always stop it."""
    network = SoakNetwork(NODE_NAMES) if options.netns else None
    cluster = Cluster(root, network)
    try:
        if network is not None:
            network.open()
        began = time.monotonic()
        await cluster.start()
        print(f"cluster up in {time.monotonic() - began:.1f} s under {root}", flush=True)
        return await _run(cluster, options)
    finally:
        await cluster.stop()
        if network is not None:
            await network.close()


async def _run(cluster: Cluster, options: Options) -> Findings:
    rng = random.Random(options.seed)
    chaos = Chaos(cluster, options.chaos_every, random.Random(rng.random()))
    models = sorted({model for node in cluster.nodes for model in node.models})

    def doors() -> dict[str, str]:
        return {n.name: n.door for n in cluster.nodes if n.up and n.name not in chaos.down}

    traffic = Traffic(
        doors,
        models,
        concurrency=options.concurrency,
        hang_after=options.hang_after,
        seed=rng.randrange(1 << 30),
    )
    resources = Resources()
    exits: list[str] = []
    began = time.monotonic()
    async with asyncio.TaskGroup() as group:
        sending = group.create_task(traffic.run(), name="soak:traffic")
        watching = group.create_task(_watch(cluster, chaos, exits), name="soak:watch")
        acting = group.create_task(chaos.run(), name="soak:chaos") if options.chaos else None
        # Resources are sampled once the first requests have warmed every process up.
        warmup = min(60.0, options.duration * 0.1)
        await asyncio.sleep(warmup)
        interval = min(30.0, max(2.0, options.duration / 60))
        sampling = group.create_task(resources.sample_forever(cluster, interval), name="soak:rss")
        await _progress(traffic.ledger, began, options.duration - warmup)
        chaos.stop()
        if acting is not None:
            await acting
        traffic.stop()
        await _drain(sending, traffic.ledger, options.hang_after)
        sampling.cancel()
        watching.cancel()
    elapsed = time.monotonic() - began
    jobs = await audit_jobs(cluster, options.settle)
    return Findings(
        traffic.ledger,
        chaos.events,
        jobs,
        resources.growth(options.max_growth),
        [scan_log(node) for node in cluster.nodes],
        exits,
        elapsed,
    )


async def _progress(ledger: Ledger, began: float, seconds: float) -> None:
    """Sleep ``seconds``, saying how the requests go every minute or so."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        await asyncio.sleep(min(left, 60.0))
        print(
            f"  t+{time.monotonic() - began:5.0f} s  sent {ledger.sent()}  ok {ledger.count('ok')}"
            f"  clear {ledger.count('clear')}  unclear {ledger.count('unclear')}"
            f"  hung {ledger.count('hung')}  in flight {len(ledger.in_flight)}",
            flush=True,
        )


async def _drain(sending: asyncio.Task[None], ledger: Ledger, hang_after: float) -> None:
    """Wait for the requests in flight; any still unanswered after the hang deadline is hung."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(sending), hang_after + 30)
    if not sending.done():
        sending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sending


async def _watch(cluster: Cluster, chaos: Chaos, exits: list[str]) -> None:
    """Note every broker that exits without the chaos having stopped it."""
    reported: set[tuple[str, int]] = set()
    while True:
        for node in cluster.nodes:
            process = node.process
            ended = process is not None and process.returncode is not None
            if ended and node.name not in chaos.down and (node.name, node.starts) not in reported:
                assert process is not None
                reported.add((node.name, node.starts))
                exits.append(f"{node.name} (pid {process.pid}) exited {process.returncode}")
        await asyncio.sleep(1.0)


# --- the report -----------------------------------------------------------------------------


def checks(findings: Findings, options: Options) -> dict[str, bool]:
    """Each audit and whether it passed."""
    ledger = findings.ledger
    hung = ledger.count("hung") + len(ledger.in_flight)
    ok_share = ledger.count("ok") / max(1, ledger.sent())
    return {
        "no request unanswered or hung": hung == 0,
        "no unclear error": ledger.count("unclear") == 0,
        "most requests answered OK (>= 50 %)": ok_share >= 0.5,
        "every job terminal": all(audit.passed for audit in findings.jobs)
        and len(findings.jobs) == 3,
        "resources flat": not any(row.flagged for row in findings.growth),
        "chaos recovered": not any(event.failure for event in findings.events),
        "no broker exited on its own": not findings.unexpected_exits,
    }


def report(findings: Findings, options: Options) -> tuple[bool, list[str]]:
    """The printed report and whether every check passed."""
    ledger = findings.ledger
    sent, ok = ledger.sent(), ledger.count("ok")
    hung = ledger.count("hung") + len(ledger.in_flight)
    latencies = sorted(o.seconds for o in ledger.outcomes if o.verdict == "ok")
    low, high = options.chaos_every
    lines = [
        f"PAIR soak: 3 nodes, {findings.elapsed:.0f} s of traffic, {options.concurrency} clients,"
        f" chaos every {low:g}-{high:g} s, seed {options.seed}",
        "",
        f"{'requests sent':<34}{sent:>8}",
        f"{'answered OK':<34}{ok:>8}  ({ok / max(1, sent) * 100:.1f} %)",
        f"{'failed with a clear error':<34}{ledger.count('clear'):>8}",
        f"{'unanswered or hung (must be 0)':<34}{hung:>8}",
        f"{'unclear error (must be 0)':<34}{ledger.count('unclear'):>8}",
    ]
    if latencies:
        p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
        lines.append(
            f"{'OK latency p50 / p99 / max':<34}{p50:>7.2f} / {p99:.2f} / {latencies[-1]:.2f} s"
        )
    lines += ["", f"{'by kind':<26}{'sent':>6}{'ok':>6}{'clear':>7}{'unclear':>9}{'hung':>6}"]
    for label in sorted({o.spec.label for o in ledger.outcomes}):
        mine = [o for o in ledger.outcomes if o.spec.label == label]
        counts = [sum(o.verdict == v for o in mine) for v in ("ok", "clear", "unclear", "hung")]
        lines.append(
            f"  {label:<24}{len(mine):>6}{counts[0]:>6}{counts[1]:>7}{counts[2]:>9}{counts[3]:>6}"
        )
    for verdict in ("clear", "unclear", "hung"):
        reasons = ledger.reasons(verdict).most_common(8)
        if reasons:
            lines += ["", f"{verdict} outcomes, commonest reasons:"]
            lines += [f"  {count:>6}  {reason}" for reason, count in reasons]
    for spec, since in ledger.in_flight.values():
        lines.append(
            f"  still unanswered: {spec.label} {spec.model} at {spec.node},"
            f" {time.monotonic() - since:.0f} s"
        )
    lines += _chaos_lines(findings.events)
    lines += _jobs_lines(findings.jobs)
    lines += _resource_lines(findings.growth, options.max_growth)
    lines += ["", "logs (records at error level, tracebacks):"]
    for log in findings.logs:
        lines.append(f"  {log.node}: {log.errors} errors, {log.tracebacks} tracebacks")
        lines += [f"      {count:>5}  {message}" for message, count in log.top]
    lines += [f"  broker exited on its own: {exit}" for exit in findings.unexpected_exits]
    results = checks(findings, options)
    lines += ["", "audit:"]
    lines += [f"  {'PASS' if passed else 'FAIL'}  {name}" for name, passed in results.items()]
    return all(results.values()), lines


def _chaos_lines(events: list[ChaosEvent]) -> list[str]:
    lines = [
        "",
        f"chaos ({len(events)} acts; back: the product recovered;"
        " routable: every door routes the node's model):",
    ]
    for event in events:
        back = f"back {event.recovered_s:.1f} s" if event.recovered_s is not None else "not back"
        routable = f", routable {event.routable_s:.1f} s" if event.routable_s is not None else ""
        failure = f"  FAILED: {event.failure}" if event.failure else ""
        lines.append(
            f"  t+{event.at:6.1f} s  {event.action:<6} {event.node}  {back}{routable}"
            f"  ({event.detail}){failure}"
        )
    return lines


def _jobs_lines(jobs: list[JobsAudit]) -> list[str]:
    lines = ["", "jobs (each broker's jobs:get-initial, newest 1000):"]
    for audit in jobs:
        states = "  ".join(f"{state} {count}" for state, count in sorted(audit.states.items()))
        lines.append(f"  {audit.node}  {states}  not terminal {len(audit.open_keys)}")
        lines += [f"      {key}" for key in audit.open_keys[:10]]
    for origin in (audit.node for audit in jobs):
        counts = ", ".join(f"{audit.node} {len(audit.views[origin])}" for audit in jobs)
        lines.append(f"  {origin}'s own jobs as each broker lists them: {counts}")
    lines += [f"  note, still after 15 s: {line}" for line in view_differences(jobs)]
    return lines


def _resource_lines(growth: list[Growth], max_growth: float) -> list[str]:
    lines = [
        "",
        f"resources (median of the first quarter -> the last; flagged above +{max_growth:g} %):",
    ]
    for row in growth:
        show = megabytes if row.metric == "rss" else (lambda value: f"{value:.0f}")
        flag = "  FLAGGED" if row.flagged else ""
        lines.append(
            f"  {row.role:<10} {row.metric:<4} {show(row.first):>10} -> {show(row.last):>10}"
            f"  {row.percent:+6.1f} %  ({row.samples} samples, {row.processes} processes){flag}"
        )
    return lines


def summary(findings: Findings, options: Options, passed: bool) -> dict[str, Any]:
    """The audit as one JSON object (the ``SOAK-AUDIT`` line)."""
    ledger = findings.ledger
    return {
        "passed": passed,
        "duration_s": round(findings.elapsed, 1),
        "seed": options.seed,
        "sent": ledger.sent(),
        "ok": ledger.count("ok"),
        "clear": ledger.count("clear"),
        "unclear": ledger.count("unclear"),
        "hung": ledger.count("hung") + len(ledger.in_flight),
        "jobs_not_terminal": sum(len(audit.open_keys) for audit in findings.jobs),
        "jobs_audited": {audit.node: audit.listed for audit in findings.jobs},
        "job_view_differences": view_differences(findings.jobs),
        "chaos": [(e.action, e.node, e.recovered_s, e.failure) for e in findings.events],
        "resource_flags": [f"{row.role} {row.metric}" for row in findings.growth if row.flagged],
        "growth_percent": {f"{r.role} {r.metric}": round(r.percent, 1) for r in findings.growth},
        "unexpected_exits": findings.unexpected_exits,
        "checks": checks(findings, options),
    }


# --- running it -----------------------------------------------------------------------------


def _options(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of traffic")
    parser.add_argument("--concurrency", type=int, default=6, help="closed-loop clients")
    parser.add_argument("--chaos-every", default="20,40", help="seconds between acts: MIN,MAX")
    parser.add_argument("--no-chaos", action="store_true", help="traffic only")
    parser.add_argument("--hang-after", type=float, default=150.0, help="a request is hung after")
    parser.add_argument("--max-growth", type=float, default=20.0, help="percent, RSS and fds")
    parser.add_argument("--settle", type=float, default=30.0, help="seconds for the last jobs")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    parser.add_argument("--root", type=Path, default=None, help="keep the data dirs here")
    parser.add_argument(
        "--netns", action="store_true", help="nodes in network namespaces; chaos breaks links"
    )
    args = parser.parse_args(argv)
    low, _, high = args.chaos_every.partition(",")
    return Options(
        duration=args.duration,
        concurrency=args.concurrency,
        chaos_every=(float(low), float(high or low)),
        hang_after=args.hang_after,
        max_growth=args.max_growth,
        settle=args.settle,
        seed=args.seed if args.seed is not None else random.randrange(1 << 30),
        root=args.root,
        chaos=not args.no_chaos,
        netns=args.netns,
    )


async def _main(options: Options) -> int:
    """Run the soak with SIGINT/SIGTERM cancelling it once (the stop after is not interrupted)."""
    main = asyncio.current_task()
    assert main is not None
    interrupted = asyncio.Event()

    def on_signal() -> None:
        if not interrupted.is_set():
            interrupted.set()
            main.cancel()

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, on_signal)
    root = options.root or Path(tempfile.mkdtemp(prefix="pair-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    keep = options.root is not None  # and the evidence of a failed check or start
    try:
        findings = await soak(options, root.resolve())
        passed, lines = report(findings, options)
        keep = keep or not passed
        print("\n".join(lines))
        print(AUDIT_PREFIX + json.dumps(summary(findings, options, passed)), flush=True)
        return 0 if passed else 1
    except ClusterError as exc:
        keep = True
        print(f"soak: the cluster could not be brought up: {exc}", file=sys.stderr)
        return 2
    except asyncio.CancelledError:
        if not interrupted.is_set():
            raise
        main.uncancel()
        print("soak: interrupted; every process it started is stopped", file=sys.stderr)
        return 130
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
        elif options.root is None:
            print(f"soak: logs and data dirs kept in {root}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse, soak, report; the exit status says whether the audit passed."""
    options = _options(argv)
    if options.netns and (reason := SoakNetwork.unavailable()) is not None:
        print(f"soak: --netns cannot run here: {reason}", file=sys.stderr)
        return 2
    print(
        f"soak: {options.duration:g} s, {options.concurrency} clients, seed {options.seed}",
        flush=True,
    )
    return asyncio.run(_main(options))


if __name__ == "__main__":
    sys.exit(main())
