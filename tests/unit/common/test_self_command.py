"""The command that runs PAIR itself: ``python -m backend`` from a checkout, the frozen
executable alone from a frozen app."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.broker.launch import BrokerLaunch
from backend.common.self_command import is_frozen, self_argv


def test_from_a_checkout_pair_is_python_dash_m_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(sys, "frozen", raising=False)
    monkeypatch.setattr(sys, "executable", "/venv/bin/python")
    assert not is_frozen()
    assert self_argv("worker", "proxy", "--fd", "ollama=5") == [
        "/venv/bin/python", "-m", "backend", "worker", "proxy", "--fd", "ollama=5",
    ]  # fmt: skip


def test_from_a_frozen_app_pair_is_the_executable_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/pair/pair")
    assert is_frozen()
    assert self_argv("node", "--stdio") == ["/opt/pair/pair", "node", "--stdio"]
    assert self_argv() == ["/opt/pair/pair"]


def test_the_app_starts_its_broker_through_self_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "executable", "/opt/pair/pair")
    launch = BrokerLaunch(Path("/tmp/pair-x"), ("--node-port", "4000"))
    assert launch.command() == [
        "/opt/pair/pair", "node", "--stdio", "--data-dir", "/tmp/pair-x", "--node-port", "4000",
    ]  # fmt: skip


def test_an_interpreter_given_to_the_launch_is_used_as_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    launch = BrokerLaunch(Path("/tmp/pair-x"), python="fake-python")
    assert launch.command()[:4] == ["fake-python", "-m", "backend", "node"]
