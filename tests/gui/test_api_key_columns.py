"""The app's key list shows each key's scope and when another computer last used it."""

from __future__ import annotations

import time

import msgspec
from PySide6.QtCore import Qt
from pytestqt.modeltest import ModelTester

from app.models.members import ApiKeysModel, last_used_text
from backend.protocol.types.apikeys import ApiKeyId, ApiKeyInfo

NOW = time.time()
PLAIN = ApiKeyInfo(id=ApiKeyId("k1"), name="laptop", prefix="pair-AbCd", created_at=NOW - 86400)
ADMIN = ApiKeyInfo(
    id=ApiKeyId("k2"),
    name="ops",
    prefix="pair-XyZw",
    created_at=NOW - 86400,
    last_used_at=NOW - 600,
    scope="admin",
)


def test_the_columns_show_scope_and_last_use(qtmodeltester: ModelTester) -> None:
    # The model reads the clock: a use 10 min before the test runs, not before the suite began.
    used = msgspec.structs.replace(ADMIN, last_used_at=time.time() - 630)
    model = ApiKeysModel()
    model.reset([PLAIN, used])
    qtmodeltester.check(model, force_py=True)  # type: ignore[no-untyped-call]
    horizontal = Qt.Orientation.Horizontal
    headers = [model.headerData(column, horizontal) for column in range(model.columnCount())]
    scope, used = headers.index("Scope"), headers.index("Last used")
    rows = [[model.data(model.index(row, column)) for column in (scope, used)] for row in (0, 1)]
    assert rows == [["Inference", "never"], ["Admin", "10 min ago"]]


def test_last_use_is_said_relative_to_now() -> None:
    assert last_used_text(PLAIN, now=NOW) == "never"
    assert last_used_text(ADMIN, now=NOW - 600) == "now"
