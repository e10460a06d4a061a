"""The front-door benchmark's plain helpers: the intervals of its ratios (``_front_door_rows``),
its main table with and without nginx (``_front_door_report``) and the nginx configuration it
generates (``_nginx``), which nginx itself must accept.

The bench scripts import their helpers by bare name (``bench/`` first on ``sys.path``), so the
folder is put on the path here the same way.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

from _common import LoadResult  # noqa: E402
from _front_door_report import main_table  # noqa: E402
from _front_door_rows import (  # noqa: E402
    BARE,
    DIRECT,
    JSON,
    NGINX,
    PAIR,
    Backend,
    Findings,
    Row,
    pooled,
    ratio,
    ratio_intervals,
    round_order,
)
from _nginx import nginx_config, search_nginx  # noqa: E402


def round_of(**latencies: list[float]) -> Row:
    return {path: LoadResult(latencies=list(values)) for path, values in latencies.items()}


def steady_round(direct: float, bare: float, pair: float) -> Row:
    return round_of(**{DIRECT: [direct] * 20, BARE: [bare] * 20, PAIR: [pair] * 20})


def test_rounds_that_agree_give_an_interval_of_one_point() -> None:
    rounds = [steady_round(10.0, 11.0, 12.5) for _ in range(6)]
    intervals = ratio_intervals(rounds, [(PAIR, BARE)], resamples=50)
    assert intervals[(PAIR, BARE, 0.5)] == (2.5, 2.5)
    assert intervals[(PAIR, BARE, 0.99)] == (2.5, 2.5)


def test_rounds_that_disagree_spread_the_interval_around_the_pooled_ratio() -> None:
    rounds = [steady_round(10.0, 11.0, 11.0 + step) for step in (0.0, 0.5, 1.0, 1.5, 2.0, 2.5)]
    low, high = ratio_intervals(rounds, [(PAIR, BARE)], resamples=200)[(PAIR, BARE, 0.5)]
    assert 1.0 <= low < high <= 3.5


def test_the_interval_is_the_same_for_the_same_seed() -> None:
    rounds = [steady_round(10.0, 11.0, 11.0 + step) for step in (0.0, 1.0, 2.0, 3.0)]
    first = ratio_intervals(rounds, [(PAIR, BARE)], resamples=100, seed=7)
    assert ratio_intervals(rounds, [(PAIR, BARE)], resamples=100, seed=7) == first


def test_a_path_below_that_adds_nothing_makes_the_ratio_infinite_or_undefined() -> None:
    rounds = [
        round_of(**{DIRECT: [10.0] * 5, BARE: [10.0] * 5, NGINX: [9.0] * 5, PAIR: [11.0] * 5})
        for _ in range(4)
    ]
    intervals = ratio_intervals(rounds, [(PAIR, BARE), (PAIR, NGINX), (BARE, NGINX)])
    assert intervals[(PAIR, BARE, 0.5)] == (math.inf, math.inf)
    assert intervals[(PAIR, NGINX, 0.99)] == (math.inf, math.inf)
    assert all(math.isnan(edge) for edge in intervals[(BARE, NGINX, 0.5)])
    assert math.isnan(ratio(1.0, 0.0))


def test_every_other_round_runs_the_paths_the_other_way_round() -> None:
    paths = (DIRECT, BARE, NGINX, PAIR)
    assert round_order(paths, 0) == paths
    assert round_order(paths, 1) == (PAIR, NGINX, BARE, DIRECT)


def test_the_nginx_config_keeps_everything_it_writes_in_its_prefix(tmp_path: Path) -> None:
    config = nginx_config(tmp_path, 23456, "http://127.0.0.1:11999")
    assert "listen 127.0.0.1:23456;" in config
    assert "server 127.0.0.1:11999;" in config
    for directive in ("keepalive 32;", "proxy_buffering off;", "error timeout non_idempotent;"):
        assert directive in config
    # Every absolute path but the location "/": the pid file, the error log, five temp paths.
    paths = [word.rstrip(";") for word in config.split() if word.startswith("/") and word != "/"]
    assert len(paths) == 7
    assert all(Path(path).is_relative_to(tmp_path) for path in paths)


def test_nginx_accepts_the_generated_config(tmp_path: Path) -> None:
    search = search_nginx()
    if search.binary is None:
        pytest.skip(search.reason)
    (tmp_path / "temp").mkdir()
    config = tmp_path / "nginx.conf"
    config.write_text(nginx_config(tmp_path, 23456, "http://127.0.0.1:11999"))
    argv = [str(search.binary), "-t", "-p", str(tmp_path), "-c", str(config)]
    result = subprocess.run(
        [*argv, "-e", str(tmp_path / "error.log")], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert "syntax is ok" in result.stderr


def findings_with(paths: tuple[str, ...]) -> Findings:
    """One JSON row at c=1 over ``paths``, six identical rounds."""
    backend = Backend("engine", "ollama", "ollama", "/a", {}, "/b", {}, "NDJSON", {1: 10})
    base = {DIRECT: 10.0, BARE: 11.0, NGINX: 10.2, PAIR: 11.5}
    rounds = [
        {path: LoadResult(latencies=[base[path]] * 10, rate=100.0) for path in paths}
        for _ in range(6)
    ]
    findings = Findings(backend)
    findings.rows[(JSON, 1)] = {path: pooled([each[path] for each in rounds]) for path in paths}
    findings.rounds[(JSON, 1)] = rounds
    return findings


def cells(line: str) -> list[str]:
    return line.strip().strip("|").split("|")


@pytest.mark.parametrize(
    ("paths", "with_nginx", "columns"),
    [((DIRECT, BARE, PAIR), False, 11), ((DIRECT, BARE, NGINX, PAIR), True, 14)],
)
def test_the_main_table_has_nginx_columns_only_with_nginx_rows(
    paths: tuple[str, ...], with_nginx: bool, columns: int
) -> None:
    header, rule, row = main_table([findings_with(paths)], with_nginx=with_nginx)
    assert len(cells(header)) == len(cells(rule)) == len(cells(row)) == columns
    assert ("PAIR/nginx p50" in header) is with_nginx
    assert "1.50x (1.50 to 1.50)" in row  # PAIR adds 1.5 ms, bare 1.0 ms, in every round
    if with_nginx:
        assert "**7.50x** (7.50 to 7.50)" in row  # over nginx's 0.2 ms: over its 2x target
