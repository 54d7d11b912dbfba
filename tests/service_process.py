"""The real service as a subprocess (`python -m service serve`), for crash and multi-process tests."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceProcess:
    def __init__(self, database_url: str, config_toml: str, tmp: Path, port: int | None = None,
                 embeddings: str | None = "none"):
        """`embeddings`: the backend when `config_toml` has no [embeddings] of its own (lexical
        only by default, for speed; None: the service's default, dense)."""
        self.port = port or free_port()
        self.config_path = tmp / f"config-{self.port}.toml"
        self.config_path.write_text(config_toml)
        self.env = {**os.environ, "DATABASE_URL": database_url, "RFP_CONFIG": str(self.config_path)}
        bouncer = os.environ.get("PGBOUNCER_URL", "").rsplit("/", 1)[0]
        if bouncer and database_url.startswith(bouncer + "/"):  # the PgBouncer pass
            self.env["RFP_DATABASE_POOLER"] = "pgbouncer-transaction"
        if embeddings is not None and "[embeddings]" not in config_toml:
            self.env["RFP_EMBEDDINGS"] = embeddings
        self.log = tmp / f"service-{self.port}.log"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> ServiceProcess:
        self.process = subprocess.Popen(  # noqa: ASYNC220 (starting is instant; we keep the handle)
            [sys.executable, "-m", "service", "serve", "--port", str(self.port)],
            cwd=ROOT, env=self.env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
        )
        async with aiohttp.ClientSession() as session:
            for _ in range(300):
                if self.process.poll() is not None:
                    raise RuntimeError(f"service exited: {self.log.read_text()[-2000:]}")
                try:
                    async with session.get(self.url + "/healthz") as response:
                        if response.status == 200:
                            return self
                except aiohttp.ClientError:
                    pass
                await asyncio.sleep(0.05)
        raise RuntimeError("service did not start in 15 s")

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, as in a crash."""
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
