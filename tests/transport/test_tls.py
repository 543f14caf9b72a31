"""TLS: a real nats-server with a certificate from a test CA; hookbus verifies it with --tls-ca."""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from bus import Bus, ConnectError, Credentials, NatsServer
from bus._transport.connection import tls_context
from bus.testing import EventRecorder
from tests.conftest import require_binary, run_cli


def make_certs(openssl: str, where: Path) -> tuple[Path, Path, Path]:
    """A CA, and a server certificate for 127.0.0.1 signed by it, made by the script docs/deploy.md gives
    (shaped for strict X.509 verification, which Python 3.13's default context applies)."""
    script = Path(__file__).resolve().parents[2] / "deploy" / "nats" / "make-certs.sh"
    env = {**os.environ, "PATH": f"{Path(openssl).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    subprocess.run(["bash", str(script), str(where), "IP:127.0.0.1,DNS:localhost", "2"], check=True,
                   capture_output=True, env=env)  # fmt: skip
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


async def test_certificates_without_the_strict_extensions_are_refused_on_every_python(tmp_path: Path) -> None:
    """The context hookbus makes verifies strictly on every version (as 3.13's default does): a server
    certificate from a CA made without key usage, as openssl's quick one-liners make it, is refused on
    3.11 and 3.12 too, not first after an upgrade."""
    openssl = require_binary("openssl")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=tmp_path, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem", "-days", "2",
        "-subj", "/CN=loose CA")  # fmt: skip
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server-key.pem", "-out", "server.csr", "-subj", "/CN=x")
    (tmp_path / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca-key.pem", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "san.ext")  # fmt: skip
    context = tls_context(str(tmp_path / "ca.pem"), None, None)
    assert context.verify_flags & ssl.VERIFY_X509_STRICT
    args = ("--tls", "--tlscert", str(tmp_path / "server.pem"), "--tlskey", str(tmp_path / "server-key.pem"))
    with NatsServer(extra_args=args) as server:
        loose = Credentials(tls_ca=str(tmp_path / "ca.pem"))
        with pytest.raises(ConnectError, match="certificate verify failed"):
            async with Bus(f"tls://127.0.0.1:{server.port}", credentials=loose, connect_timeout=2):
                pass


async def test_a_client_certificate_from_the_script_is_accepted_by_a_verifying_server(tmp_path: Path) -> None:
    openssl = require_binary("openssl")
    _, cert, key = make_certs(openssl, tmp_path)
    ca = tmp_path / "ca.pem"
    args = ("--tls", "--tlscert", str(cert), "--tlskey", str(key), "--tlscacert", str(ca), "--tlsverify")
    with NatsServer(extra_args=args) as server:
        url = f"tls://127.0.0.1:{server.port}"
        with pytest.raises(ConnectError):  # no client certificate: the server refuses
            async with Bus(url, credentials=Credentials(tls_ca=str(ca)), connect_timeout=2):
                pass
        client = {"tls_cert": str(tmp_path / "client.pem"), "tls_key": str(tmp_path / "client-key.pem")}
        mutual = Credentials(tls_ca=str(ca), **client)
        async with Bus(url, credentials=mutual) as bus:
            await bus.emit("eva.custom.mutual", {})
            await bus.flush()
