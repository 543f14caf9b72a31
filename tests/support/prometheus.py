"""A real Prometheus (Debian's package) for tests: scrape given targets, answer PromQL."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import orjson


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Prometheus:
    """One prometheus process scraping ``targets`` (host:port) every ``interval`` (a second unless told)."""

    def __init__(
        self,
        binary: str,
        targets: dict[str, list[str]],
        rule_files: list[Path] | None = None,
        interval: str = "1s",
    ) -> None:
        self.binary = binary
        self.dir = Path(tempfile.mkdtemp(prefix="hookbus-prom-"))
        self.port = free_port()
        config: dict[str, Any] = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [
                {"job_name": job, "static_configs": [{"targets": addrs}]} for job, addrs in targets.items()
            ],
        }
        if rule_files:
            config["rule_files"] = [str(path) for path in rule_files]
        (self.dir / "prometheus.yml").write_bytes(orjson.dumps(config))  # JSON is valid YAML
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30) -> Prometheus:
        log = open(self.dir / "prometheus.log", "wb")  # noqa: SIM115 - closed by stop()
        self._log = log
        self.proc = subprocess.Popen(
            [
                self.binary,
                f"--config.file={self.dir / 'prometheus.yml'}",
                f"--storage.tsdb.path={self.dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=1).read()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"prometheus did not start: {(self.dir / 'prometheus.log').read_text()[-2000:]}"
                    ) from None
                time.sleep(0.2)

    def query(self, expr: str) -> dict[str, Any]:
        """The API's answer to an instant query (status, data or error)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            with urllib.request.urlopen(url, timeout=10) as reply:
                result: dict[str, Any] = orjson.loads(reply.read())
                return result
        except urllib.error.HTTPError as exc:
            error: dict[str, Any] = orjson.loads(exc.read())
            return error

    def wait_for_series(self, expr: str, timeout: float = 30) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = self.query(expr)
            if answer.get("status") == "success" and answer["data"]["result"]:
                return list(answer["data"]["result"])
            time.sleep(0.5)
        raise TimeoutError(f"no data for {expr!r} within {timeout}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if hasattr(self, "_log"):
            self._log.close()
