"""The TaskLog contract, run against the InMemoryTaskLog fake, the FileTaskLog on real files and
the PostgresTaskLog on a real PostgreSQL (`tests/support/postgres.py`): appends get sequence
numbers, illegal transitions append nothing, names must be slugs, a torn
last line is ignored on read (reported) and cut off by the next append, a corrupt line in the
middle stops reading with its line number and refuses appends, logs are listed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from soong_agent.adapters.postgres import PostgresSettings, PostgresSyncDatabase, PostgresTaskLog
from soong_agent.adapters.postgres.task_sql import TABLES
from soong_agent.adapters.tasks import FileTaskLog
from soong_agent.domain.tasks import fold
from soong_agent.ports.tasks import (
    StepAdded,
    StepClaimed,
    StepCompleted,
    TaskCreated,
    TaskLog,
    TaskLogCorrupt,
    TaskNameRefused,
    TaskRef,
    TaskTransitionRefused,
)
from soong_agent.testing import InMemoryTaskLog
from tests.support.postgres_lines import LinesInDatabase

SES = "ses_1"
T0 = 1_767_225_600.0


class Backend:
    """One implementation, and raw access to a log's bytes behind its back."""

    def __init__(self, log: TaskLog, raw: Callable[[str, str], bytes], put: Callable[..., None]):
        self.log = log
        self.raw = raw
        self.put = put


def fake_backend(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    fake = InMemoryTaskLog()
    return Backend(fake, fake.raw, fake.put_raw)


def postgres_backend(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    url = str(request.getfixturevalue("postgres_url"))
    database = PostgresSyncDatabase(PostgresSettings(url))
    request.addfinalizer(database.close)
    lines = LinesInDatabase(url, TABLES)  # a hand edit: the log's rows written anew
    return Backend(PostgresTaskLog(database), lines.raw, lines.put)


def file_backend(tmp_path: Path, request: pytest.FixtureRequest) -> Backend:
    log = FileTaskLog(tmp_path / "tasks")

    def raw(session: str, name: str) -> bytes:
        path = log.path(session, name)
        return path.read_bytes() if path.exists() else b""

    def put(session: str, name: str, data: bytes) -> None:
        path = log.path(session, name)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)  # a hand edit: a new file

    return Backend(log, raw, put)


@pytest.fixture(
    params=[fake_backend, file_backend, postgres_backend],
    ids=["InMemoryTaskLog", "FileTaskLog", "PostgresTaskLog"],
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    factory: Callable[[Path, pytest.FixtureRequest], Backend] = request.param
    return factory(tmp_path, request)


def seed(log: TaskLog, name: str = "build") -> None:
    log.append(SES, name, TaskCreated(seq=0, at=T0, actor="run_a", title="Build it"))
    log.append(SES, name, StepAdded(seq=0, at=T0, actor="run_a", step_id="a", title="A"))
    log.append(
        SES,
        name,
        StepAdded(seq=0, at=T0, actor="run_a", step_id="b", title="B", depends_on=("a",)),
    )


def test_every_backend_implements_the_port(backend: Backend) -> None:
    assert isinstance(backend.log, TaskLog)


def test_a_missing_log_reads_empty(backend: Backend) -> None:
    assert backend.log.read(SES, "nothing") == ([], [])
    assert backend.log.list() == []


def test_appends_get_sequence_numbers_and_read_back(backend: Backend) -> None:
    seed(backend.log)
    records, problems = backend.log.read(SES, "build")
    assert problems == []
    assert [r.seq for r in records] == [1, 2, 3]
    assert [r.kind for r in records] == ["task_created", "step_added", "step_added"]
    assert backend.raw(SES, "build").count(b"\n") == 3
    assert fold(records).state.ready(T0) == ["a"]


def test_an_illegal_transition_appends_nothing(backend: Backend) -> None:
    seed(backend.log)
    before = backend.raw(SES, "build")
    claim_b = StepClaimed(
        seq=0, at=T0, actor="run_a", step_id="b", owner="run_a", lease_expires_at=T0 + 60
    )
    with pytest.raises(TaskTransitionRefused, match="waits for a"):
        backend.log.append(SES, "build", claim_b)
    complete = StepCompleted(seq=0, at=T0, actor="run_b", step_id="a")
    with pytest.raises(TaskTransitionRefused, match="not claimed"):
        backend.log.append(SES, "build", complete)
    cycle = StepAdded(seq=0, at=T0, actor="run_a", step_id="c", title="C", depends_on=("c",))
    with pytest.raises(TaskTransitionRefused, match="cycle"):
        backend.log.append(SES, "build", cycle)
    assert backend.raw(SES, "build") == before


def test_a_step_on_a_log_without_task_is_refused(backend: Backend) -> None:
    with pytest.raises(TaskTransitionRefused, match="does not exist"):
        backend.log.append(SES, "x", StepAdded(seq=0, at=T0, actor="r", step_id="a", title="A"))
    assert backend.raw(SES, "x") == b""


@pytest.mark.parametrize("name", ["", "../x", "a/b", "a.b", "Upper", "-a", "a" * 65, ".."])
def test_names_must_be_slugs(backend: Backend, name: str) -> None:
    with pytest.raises(TaskNameRefused):
        backend.log.append(SES, name, TaskCreated(seq=0, at=T0, actor="r", title="T"))
    with pytest.raises(TaskNameRefused):
        backend.log.read(SES, name)


@pytest.mark.parametrize("session", ["", "../x", "a/b", "."])
def test_session_ids_must_be_plain(backend: Backend, session: str) -> None:
    with pytest.raises(TaskNameRefused):
        backend.log.append(session, "t", TaskCreated(seq=0, at=T0, actor="r", title="T"))


def test_a_torn_last_line_is_ignored_then_cut_off_by_the_next_append(backend: Backend) -> None:
    seed(backend.log)
    whole = backend.raw(SES, "build")
    backend.put(SES, "build", whole + b'{"seq": 4, "at": 1, "act')
    records, problems = backend.log.read(SES, "build")
    assert len(records) == 3
    assert len(problems) == 1 and "line 4" in problems[0] and "torn" in problems[0]
    claim = StepClaimed(
        seq=0, at=T0, actor="run_a", step_id="a", owner="run_a", lease_expires_at=T0 + 60
    )
    assert backend.log.append(SES, "build", claim).seq == 4
    records, problems = backend.log.read(SES, "build")
    assert problems == [] and [r.seq for r in records] == [1, 2, 3, 4]


def test_a_corrupt_line_in_the_middle_stops_reading_and_appending(backend: Backend) -> None:
    seed(backend.log)
    lines = backend.raw(SES, "build").splitlines(keepends=True)
    backend.put(SES, "build", lines[0] + b"not json\n" + b"".join(lines[1:]))
    records, problems = backend.log.read(SES, "build")
    assert len(records) == 1
    assert len(problems) == 1 and problems[0].startswith("line 2:")
    with pytest.raises(TaskLogCorrupt, match="line 2"):
        backend.log.append(SES, "build", StepAdded(seq=0, at=T0, actor="r", step_id="z", title="Z"))


def test_an_illegal_record_written_by_hand_refuses_appends(backend: Backend) -> None:
    seed(backend.log)
    forged = StepCompleted(seq=4, at=T0, actor="run_x", step_id="b").model_dump_json()
    backend.put(SES, "build", backend.raw(SES, "build") + forged.encode() + b"\n")
    assert fold(backend.log.read(SES, "build").records).problems[0].startswith("line 4:")
    with pytest.raises(TaskLogCorrupt, match="line 4"):
        backend.log.append(SES, "build", StepAdded(seq=0, at=T0, actor="r", step_id="z", title="Z"))


def test_list_names_every_log_by_session(backend: Backend) -> None:
    seed(backend.log, "build")
    seed(backend.log, "alpha")
    backend.log.append("ses_2", "other", TaskCreated(seq=0, at=T0, actor="r", title="O"))
    assert backend.log.list() == [
        TaskRef(SES, "alpha"),
        TaskRef(SES, "build"),
        TaskRef("ses_2", "other"),
    ]
    assert backend.log.list("ses_2") == [TaskRef("ses_2", "other")]
    assert str(TaskRef(SES, "alpha")) == "ses_1/alpha"


def test_an_expired_lease_lets_another_actor_claim(backend: Backend) -> None:
    seed(backend.log)
    backend.log.append(
        SES,
        "build",
        StepClaimed(
            seq=0, at=T0, actor="run_a", step_id="a", owner="run_a", lease_expires_at=T0 + 60
        ),
    )
    early = StepClaimed(
        seq=0, at=T0 + 59, actor="run_b", step_id="a", owner="run_b", lease_expires_at=T0 + 120
    )
    with pytest.raises(TaskTransitionRefused, match="held by 'run_a'"):
        backend.log.append(SES, "build", early)
    late = early.model_copy(update={"at": T0 + 60, "lease_expires_at": T0 + 200})
    assert backend.log.append(SES, "build", late).seq == 5
    done = StepCompleted(seq=0, at=T0 + 61, actor="run_a", step_id="a")
    with pytest.raises(TaskTransitionRefused, match="held by 'run_b'"):
        backend.log.append(SES, "build", done)
