"""Strict catalog mode, and the embedded server launcher."""

from __future__ import annotations

import pytest

from bus import Bus, CatalogError, NatsServer, ServerError


async def test_strict_mode_checks_catalogued_payloads(nats_url: str) -> None:
    async with Bus(nats_url, strict=True) as bus:
        assert await bus.emit("prx.lifecycle.tool_call", {"tool": "shell", "success": True, "output": ""})
        with pytest.raises(CatalogError, match="missing field 'success'"):
            await bus.emit("prx.lifecycle.tool_call", {"tool": "shell", "output": ""})
        with pytest.raises(CatalogError, match="'duration_ms' must be number, not string"):
            await bus.emit(
                "prx.lifecycle.llm_response", {"provider": "p", "model": "m", "duration_ms": "5", "success": True}
            )
        assert await bus.emit("eva.custom.anything", {"free": "form"})  # not catalogued: open


async def test_lenient_by_default(bus: Bus) -> None:
    assert await bus.emit("prx.lifecycle.tool_call", {"whatever": 1})


def test_missing_binary_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOKBUS_NATS_SERVER", "/nonexistent/nats-server")
    with pytest.raises(ServerError, match="HOOKBUS_NATS_SERVER='/nonexistent/nats-server' is not an executable"):
        NatsServer().start()


def test_server_that_cannot_start_reports_its_log(tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "bad.conf"
    bad.write_text("this is { not a config")
    server = NatsServer(config_file=bad)
    with pytest.raises(ServerError, match="exited with code"):
        server.start()
    server.cleanup()


def test_restart_keeps_the_port() -> None:
    with NatsServer() as server:
        url = server.url
        server.restart()
        assert server.url == url and server.running()
    assert not server.running()
