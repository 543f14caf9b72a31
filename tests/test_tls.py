"""TLS: a real nats-server with a certificate from a test CA; hookbus verifies it with --tls-ca."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bus import Bus, ConnectError, NatsServer
from bus.testing import EventRecorder

from .conftest import require_binary, run_cli


def make_certs(openssl: str, where: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate for 127.0.0.1 signed by it."""

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=where, check=True, capture_output=True)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=hookbus test CA",
    )
    run(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server-key.pem",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    )
    (where / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "san.ext")  # fmt: skip
    return where / "ca.pem", where / "server.pem", where / "server-key.pem"


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NatsServer, Path]]:
    openssl = require_binary("openssl")
    ca, cert, key = make_certs(openssl, tmp_path_factory.mktemp("tls"))
    with NatsServer(extra_args=("--tls", "--tlscert", str(cert), "--tlskey", str(key))) as server:
        yield server, ca


async def test_tls_with_the_ca_works(tls_server: tuple[NatsServer, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    server, ca = tls_server
    monkeypatch.setenv("HOOKBUS_NATS_TLS_CA", str(ca))
    url = f"tls://127.0.0.1:{server.port}"
    async with Bus(url) as bus:
        rec = EventRecorder()
        await bus.subscribe("eva.custom.>", rec)
        await bus.flush()
        done = await asyncio.to_thread(
            run_cli, "emit", "eva.custom.secure", "{}", "--nats-url", url, "--tls-ca", str(ca)
        )
        assert done.returncode == 0, done.stderr
        [event] = await rec.wait_for(1)
        assert event.subject == "eva.custom.secure"


async def test_an_unverifiable_server_is_refused_clearly(tls_server: tuple[NatsServer, Path], tmp_path: Path) -> None:
    server, _ = tls_server
    with pytest.raises(ConnectError, match="certificate verify failed"):
        async with Bus(f"tls://127.0.0.1:{server.port}", connect_timeout=2):
            pass
    done = await asyncio.to_thread(
        run_cli,
        "emit",
        "eva.custom.x",
        "{}",
        "--nats-url",
        f"tls://127.0.0.1:{server.port}",
        "--tls-ca",
        str(tmp_path / "missing.pem"),
    )
    assert done.returncode == 1 and "TLS CA file" in done.stderr and "does not exist" in done.stderr
