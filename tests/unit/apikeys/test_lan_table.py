"""The routing table carries the LAN access flag, and the key hashes only while it is on."""

from __future__ import annotations

from backend.components.proxy.table import LanAccess, TableSource, build_table
from backend.components.settings.schema import defaults
from backend.components.settings.view import SettingsView
from backend.protocol.proxy import ProxyTargets


def _table(lan: LanAccess | None) -> ProxyTargets:
    return build_table(node_id="self", local={}, nodes=[], loads={}, generation=1, lan=lan)


def test_off_by_default_and_no_hashes_reach_the_worker_while_off() -> None:
    assert (_table(None).lan_access, _table(None).api_key_hashes) == (False, [])
    off = _table(LanAccess(enabled=False, key_hashes={"b", "a"}))
    assert (off.lan_access, off.api_key_hashes) == (False, [])


def test_on_the_hashes_are_sent_in_a_stable_order() -> None:
    on = _table(LanAccess(enabled=True, key_hashes=frozenset({"b", "a"})))
    assert (on.lan_access, on.api_key_hashes) == (True, ["a", "b"])
    assert on == _table(LanAccess(enabled=True, key_hashes=["a", "b"])), "unchanged: not re-sent"


def test_the_table_source_reads_the_lan_access_each_time() -> None:
    state = LanAccess()
    source = TableSource(
        node_id=lambda: "self",
        local=dict,
        nodes=list,
        loads=dict,
        timeouts=lambda: (1.0, 1.0),
        lan=lambda: state,
    )
    assert source().lan_access is False
    state = LanAccess(enabled=True, key_hashes=("h",))
    assert (source().lan_access, source().api_key_hashes) == (True, ["h"])
    plain = TableSource(
        node_id=lambda: "self", local=dict, nodes=list, loads=dict, timeouts=lambda: (1.0, 1.0)
    )
    assert (plain().lan_access, plain().api_key_hashes) == (False, [])


def test_the_allowed_origins_setting_reaches_the_worker_whatever_lan_access_says() -> None:
    origins = ("chrome-extension://*", "app://obsidian.md")
    assert _table(LanAccess(origins=origins)).allowed_origins == list(origins)
    assert _table(None).allowed_origins == []
    view = SettingsView.of({**defaults(), "allowed_origins": " chrome-extension://* ,, app://x "})
    assert view.allowed_origins == ("chrome-extension://*", "app://x")
