"""Every run starts through the one starter (issue 32): in the application and the
entrypoints, only `application/runs/starter.py` makes a run's or a new session's records,
has a run assembled and starts a loop; the recorder only updates the records of the run it
records. A new kind of run that starts itself elsewhere fails here."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "soong_agent"
STARTER = "application/runs/starter.py"
ALLOWED: dict[str, set[str]] = {
    # a rewind is recorded as a run of no loop, written whole in one commit (RWD-1)
    "RunInfo": {STARTER, "application/runs/recorder.py", "application/checkpoints/rewind.py"},
    "SessionInfo": {STARTER, "application/runs/recorder.py"},
    ".assemble": {STARTER},
    ".loop.run": {STARTER},
}


def _found(tree: ast.AST) -> set[str]:
    """The run-starting calls in one module."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("RunInfo", "SessionInfo"):
            found.add(func.id)
        elif isinstance(func, ast.Attribute) and func.attr == "assemble":
            found.add(".assemble")
        elif (
            isinstance(func, ast.Attribute)
            and func.attr == "run"
            and isinstance(func.value, ast.Attribute)
            and func.value.attr == "loop"
        ):
            found.add(".loop.run")
    return found


def test_only_the_starter_starts_runs() -> None:
    misplaced: list[str] = []
    seen: dict[str, set[str]] = {name: set() for name in ALLOWED}
    for layer in ("application", "entrypoints"):
        for path in sorted((PACKAGE / layer).rglob("*.py")):
            relative = path.relative_to(PACKAGE).as_posix()
            for name in _found(ast.parse(path.read_text(encoding="utf-8"))):
                seen[name].add(relative)
                if relative not in ALLOWED[name]:
                    misplaced.append(f"{relative}: {name}(...)")
    assert misplaced == [], (
        "a run is started outside application/runs/starter.py (make it a Lineage and call "
        "RunStarter.prepare/launch):\n" + "\n".join(misplaced)
    )
    assert STARTER in seen["RunInfo"] and STARTER in seen[".loop.run"]  # the check sees it


def test_the_check_sees_a_run_started_elsewhere() -> None:
    source = (
        "async def start(assembler, spec, rec):\n"
        "    info = RunInfo(id='r', session_id='s', started_at=0.0)\n"
        "    assembled = assembler.assemble(spec)\n"
        "    await assembled.loop.run(rec, 'hi', resumed=False)\n"
    )
    assert _found(ast.parse(source)) == {"RunInfo", ".assemble", ".loop.run"}
