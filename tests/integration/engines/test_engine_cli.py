"""`pair engines`, `pair engine start|stop|set-port|status|logs`, `pair models`, `pair pull` and
`pair model load|eject|delete` (Ollama emulator), also with `--node` naming this node (by name
or id prefix: the same as no `--node`) or no node."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from tests.integration.conftest import ROOT, Broker, free_port

StartBroker = Callable[..., Broker]


def _pair(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "backend", *args, "--data-dir", str(data_dir)],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,  # no terminal: a question is refused, never waited for
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_engine_commands_drive_the_broker(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, port = ollama_node
    start_broker(data_dir=data_dir)
    listed = _pair(data_dir, "engines")
    assert listed.returncode == 0, listed.stderr
    assert "ollama" in listed.stdout and "lmstudio" in listed.stdout
    started = _pair(data_dir, "engine", "start", "ollama")
    assert started.returncode == 0, started.stderr
    assert f"Ollama: running on port {port}" in started.stdout
    pulled = _pair(data_dir, "pull", "ollama", "phi3:mini")
    assert pulled.returncode == 0, pulled.stderr
    assert "100.0%" in pulled.stdout and "phi3:mini is ready in ollama" in pulled.stdout
    models = _pair(data_dir, "models")
    assert "phi3:mini" in models.stdout
    missing = _pair(data_dir, "engine", "start", "nope")
    assert missing.returncode == 1 and "no engine named 'nope'" in missing.stderr
    stopped = _pair(data_dir, "engine", "stop", "ollama")
    assert "Ollama: stopped" in stopped.stdout


def test_node_naming_this_node_works_like_no_node_and_an_unknown_one_does_nothing(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, port = ollama_node
    start_broker(data_dir=data_dir)
    status = _pair(data_dir, "status", "--json")
    assert status.returncode == 0, status.stderr
    identity = json.loads(status.stdout)
    name, prefix = identity["node_name"], identity["node_id"][:6]

    unknown = _pair(data_dir, "engine", "start", "ollama", "--node", "nosuch")
    assert unknown.returncode == 2, unknown.stderr
    assert "no node is called 'nosuch'" in unknown.stderr
    assert f"{name} ({identity['node_id'][:8]}, this node)" in unknown.stderr
    assert unknown.stdout == ""

    plain = _pair(data_dir, "engines")
    assert plain.returncode == 0, plain.stderr
    assert "ollama    stopped" in plain.stdout  # the refused start did nothing
    for given in (name, name.upper(), prefix):
        by_node = _pair(data_dir, "engines", "--node", given)
        assert (by_node.returncode, by_node.stdout) == (0, plain.stdout), by_node.stderr

    started = _pair(data_dir, "engine", "start", "ollama", "--node", prefix)
    assert started.returncode == 0, started.stderr
    assert started.stdout == f"Ollama: running on port {port}\n"
    pulled = _pair(data_dir, "pull", "ollama", "phi3:mini", "--node", name)
    assert pulled.returncode == 0, pulled.stderr
    assert "100.0%" in pulled.stdout and "phi3:mini is ready in ollama\n" in pulled.stdout
    models = _pair(data_dir, "models")
    assert "phi3:mini" in models.stdout
    assert _pair(data_dir, "models", "--node", prefix).stdout == models.stdout
    refused = _pair(data_dir, "pull", "ollama", "gemma:2b", "--node", "nosuch")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "gemma:2b" not in _pair(data_dir, "models").stdout  # nothing was pulled
    stopped = _pair(data_dir, "engine", "stop", "ollama", "--node", name)
    assert stopped.stdout == "Ollama: stopped\n", stopped.stderr

    jobs = _pair(data_dir, "jobs")
    assert (jobs.returncode, jobs.stdout.splitlines()[-1]) == (0, "no jobs yet"), jobs.stderr
    assert _pair(data_dir, "jobs", "--cluster").stdout == jobs.stdout


def _model_line(data_dir: Path, model: str) -> str | None:
    """``pair models``' line for ``model`` of Ollama from its ENGINE column on (None: not
    listed)."""
    listed = _pair(data_dir, "models")
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    cells = [row[header.index("ENGINE") :].rstrip() for row in rows]
    return next((cell for cell in cells if cell.split()[1:2] == [model]), None)


def test_set_port_moves_the_engine_and_status_shows_it(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, _ = ollama_node
    start_broker(data_dir=data_dir)
    stopped_port, running_port = free_port(), free_port()
    moved = _pair(data_dir, "engine", "set-port", "ollama", str(stopped_port))
    assert (moved.returncode, moved.stdout) == (0, f"Ollama: port {stopped_port}, stopped\n")
    status = _pair(data_dir, "engine", "status", "ollama")
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith("Ollama: stopped\n")
    assert re.search(rf"^  port +{stopped_port}\b", status.stdout, re.MULTILINE), status.stdout

    started = _pair(data_dir, "engine", "start", "ollama")
    assert started.stdout == f"Ollama: running on port {stopped_port}\n", started.stderr
    moved = _pair(data_dir, "engine", "set-port", "ollama", str(running_port))
    assert moved.stdout == f"Ollama: port {running_port}, running\n", moved.stderr
    node_id = json.loads(_pair(data_dir, "status", "--json").stdout)["node_id"]
    status = _pair(data_dir, "engine", "status", "ollama", "--node", node_id[:6])  # this node
    assert status.returncode == 0, status.stderr
    assert status.stdout.startswith(f"Ollama: running on port {running_port}\n")
    assert re.search(r"^  pid +\d+$", status.stdout, re.MULTILINE), status.stdout
    assert "running on port" in _pair(data_dir, "engine", "restart", "ollama").stdout

    refused = _pair(data_dir, "engine", "set-port", "ollama", "65536")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert "port 65536 is outside 1024-65535" in refused.stderr
    assert (
        f"running on port {running_port}\n" in _pair(data_dir, "engine", "status", "ollama").stdout
    )
    logs = _pair(data_dir, "engine", "logs", "ollama", "--lines", "3")
    assert logs.returncode == 0, logs.stderr
    assert len(logs.stdout.splitlines()) <= 3
    assert _pair(data_dir, "engine", "stop", "ollama").stdout == "Ollama: stopped\n"


def test_model_load_eject_and_delete_change_what_models_reports(
    start_broker: StartBroker, ollama_node: tuple[Path, int]
) -> None:
    data_dir, _ = ollama_node
    start_broker(data_dir=data_dir)
    assert _pair(data_dir, "engine", "start", "ollama").returncode == 0
    model = "tinyllama:latest"
    assert _model_line(data_dir, model) == f"ollama    {model}"  # listed, not loaded

    loaded = _pair(data_dir, "model", "load", "ollama", model)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout == f"{model} is loaded in ollama\n"
    line = _model_line(data_dir, model)
    assert line is not None and line.endswith("loaded, 1 slots")
    assert _model_line(data_dir, "qwen2:0.5b") == "ollama    qwen2:0.5b"  # the other stays out

    ejected = _pair(data_dir, "model", "eject", "ollama", model)
    assert (ejected.returncode, ejected.stdout) == (0, f"{model} is ejected from ollama\n")
    assert _model_line(data_dir, model) == f"ollama    {model}"

    unasked = _pair(data_dir, "model", "delete", "ollama", model)
    assert (unasked.returncode, unasked.stdout) == (2, "")
    assert "pass --yes" in unasked.stderr
    assert _model_line(data_dir, model) is not None  # nothing was deleted

    deleted = _pair(data_dir, "model", "delete", "ollama", model, "--yes")
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.startswith(f"{model} is deleted from ollama; ")
    assert _model_line(data_dir, model) is None
    assert _model_line(data_dir, "qwen2:0.5b") is not None

    again = _pair(data_dir, "model", "load", "ollama", model)
    assert (again.returncode, again.stdout) == (1, "")
    assert "the broker answered with an error" in again.stderr
    assert _pair(data_dir, "engine", "stop", "ollama").returncode == 0
