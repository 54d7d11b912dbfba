"""CI: the built wheel runs on its own. Builds it (`pip wheel --no-deps`), installs it (not editable)
into a fresh virtual environment outside the checkout, and from a directory outside the checkout
runs `python -m service migrate`, creates an account and a read token with the CLI, starts
`python -m service serve` on a free port and expects 200 from /readyz and from an authenticated
read. Standard library only; the embedded PostgreSQL (or $DATABASE_URL) as `serve` would use it.

    python3 tests/wheel_check.py [--keep]      (make wheel-check)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Not part of the source: copying them would put stale files into the wheel (build/) or take long.
NOT_SOURCE = (".git", ".venv", "var", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
              ".ruff_cache", "config.toml")


def run(*command: str | Path, cwd: Path, env: dict[str, str], capture: bool = False) -> str:
    print("+", " ".join(map(str, command)), flush=True)
    done = subprocess.run(command, cwd=cwd, env=env, check=True, text=True,
                          stdout=subprocess.PIPE if capture else None)
    return done.stdout if capture else ""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str, token: str | None = None) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def check(work: Path) -> None:
    source, dist, env_dir, run_dir = work / "source", work / "dist", work / "venv", work / "run"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    run_dir.mkdir()
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["RFP_DATA_DIR"] = str(run_dir / "var")  # the embedded PostgreSQL, unless DATABASE_URL is set

    pip = (python, "-m", "pip")
    run(*pip, "wheel", "--quiet", "--no-deps", "--wheel-dir", dist, source, cwd=run_dir, env=env)
    [wheel] = dist.glob("*.whl")
    run(*pip, "install", "--quiet", wheel, cwd=run_dir, env=env)
    shutil.rmtree(source)  # nothing of the checkout is left to import from

    where = run(python, "-c", "import service.db as d; print(d.__file__); print(d.SQL)",
                cwd=run_dir, env=env, capture=True).split()
    assert all(Path(p).is_relative_to(env_dir) for p in where), f"not the installed wheel: {where}"
    # The default embeddings backend from the installed files alone: tokenizer vocabulary (package
    # data), the model package, onnxruntime.
    dims = run(python, "-c", "from service.answering.minilm_onnx import OnnxEmbedder; "
               "print(len(OnnxEmbedder().encode(['Is data encrypted at rest?'])[0]))",
               cwd=run_dir, env=env, capture=True).strip()
    assert dims == "384", f"the onnx embedder gave {dims!r}"

    cli = (python, "-m", "service")
    run(*cli, "migrate", cwd=run_dir, env=env)
    admin = "admin@wheel-check.invalid"
    made = json.loads(run(*cli, "account", "create", "--name", "Wheel check", "--admin-email", admin,
                          "--json", cwd=run_dir, env=env, capture=True))
    token = json.loads(run(*cli, "token", "create", "--account", made["account"]["id"], "--email", admin,
                           "--scopes", "read", "--json", cwd=run_dir, env=env, capture=True))["token"]

    port = free_port()
    print(f"+ python -m service serve --port {port}", flush=True)
    server = subprocess.Popen([*cli, "serve", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                              cwd=run_dir, env=env)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, f"serve exited with {server.returncode}"
            try:
                if get(f"{base}/readyz") == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "serve did not get ready in 90 s"
            time.sleep(0.2)
        status = get(f"{base}/api/v1/members", token)
        assert status == 200, f"GET /api/v1/members with the CLI's token: {status}"
        print(f"wheel check: {wheel.name} installed, migrated, serving; /readyz 200, "
              "GET /api/v1/members 200", flush=True)
    finally:
        server.send_signal(signal.SIGINT)  # stops the embedded PostgreSQL too
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rfp-wheel-check-"))
    try:
        check(work)
    except (AssertionError, subprocess.CalledProcessError) as exc:
        print(f"wheel check FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
