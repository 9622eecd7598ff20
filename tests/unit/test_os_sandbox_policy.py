"""The OS sandbox's pure decisions: the policy, bwrap's mounts, Landlock's rules, what a
denial looks like, why a mechanism fails, and which sandbox each mode gets (SBX-3)."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from soong_agent.adapters.ossandbox import NoSandbox, RefusingSandbox, choose_sandbox
from soong_agent.adapters.ossandbox.denials import find_denials
from soong_agent.adapters.ossandbox.landlock import LandlockSandbox
from soong_agent.adapters.ossandbox.policy import (
    READ_RIGHTS,
    WRITE_RIGHTS,
    LandlockRule,
    PathKind,
    build_policy,
    bwrap_arguments,
    git_tracked,
    landlock_rules,
    landlock_unenforced,
)
from soong_agent.adapters.ossandbox.probe import (
    HostFacts,
    explain_bwrap_failure,
    explain_landlock_failure,
)
from soong_agent.adapters.ossandbox.select import warning_once
from soong_agent.ports.ossandbox import (
    MechanismStatus,
    SandboxPolicy,
    SandboxProbe,
    SandboxUnavailable,
)

# --- build_policy ----------------------------------------------------------------------------


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    home = tmp_path / "home"
    agent = home / ".soong-agent"
    project = tmp_path / "proj"
    for folder in (home / ".ssh", home / ".aws", agent / "memory", project / "sub" / "deep"):
        folder.mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("KEY")
    (home / ".ssh" / "known_hosts").write_text("host")
    (agent / "config.toml").write_text("")
    (project / ".env").write_text("X=1")
    (project / "sub" / ".env.local").write_text("Y=2")
    (project / "node_modules" / "pkg").mkdir(parents=True)
    (project / "node_modules" / "pkg" / ".env").write_text("skipped")
    (tmp_path / "db.sqlite").write_text("")
    (tmp_path / "db.sqlite-wal").write_text("")
    return {"home": home, "agent": agent, "project": project, "tmp": tmp_path}


def test_policy_denies_what_exists_and_names_why(world: dict[str, Path]) -> None:
    policy = build_policy(
        project=str(world["project"]),
        sensitive=["~/.ssh", "~/.gnupg", ".env", ".env.*", str(world["tmp"] / "db.sqlite")],
        agent_home=str(world["agent"]),
        home=str(world["home"]),
        tmp_dir=str(world["tmp"]),
    )
    reasons = dict(zip(policy.deny_paths, policy.deny_reasons, strict=True))
    project = os.path.realpath(world["project"])
    home = os.path.realpath(world["home"])
    assert reasons[f"{home}/.soong-agent"] == "SOONG_AGENT_HOME, the agent's home"
    assert reasons[f"{home}/.ssh"] == "~/.ssh"
    assert reasons[f"{home}/.aws"] == "~/.aws"
    assert f"{home}/.gnupg" not in reasons  # does not exist: nothing to hide
    assert reasons[f"{project}/.env"] == "tools.sensitive_paths: .env"
    assert reasons[f"{project}/sub/.env.local"] == "tools.sensitive_paths: .env.*"
    assert f"{project}/node_modules/pkg/.env" not in reasons  # not searched
    tmp = os.path.realpath(world["tmp"])
    assert {f"{tmp}/db.sqlite", f"{tmp}/db.sqlite-wal"} <= set(reasons)  # sidecars too
    assert policy.read_exceptions == (f"{home}/.ssh/known_hosts",)
    assert policy.write_roots == (project,)
    assert policy.writable() == (project, tmp)
    assert policy.network is False


def test_write_roots_resolve_and_tmp_write_adds_the_system_tmp(world: dict[str, Path]) -> None:
    other = world["tmp"] / "other"
    other.mkdir()
    link = world["tmp"] / "link"
    link.symlink_to(other)
    policy = build_policy(
        project=str(world["project"]),
        write_roots=["<ignored-missing>", str(link), "sub"],
        home=str(world["home"]),
        allow_tmp_write=True,
        system_tmp=str(world["tmp"]),
    )
    project = os.path.realpath(world["project"])
    assert policy.write_roots == (
        os.path.realpath(other),
        f"{project}/sub",
        os.path.realpath(world["tmp"]),
    )


def test_a_write_root_is_never_denied_whole(world: dict[str, Path]) -> None:
    policy = build_policy(
        project=str(world["project"]), sensitive=[str(world["project"])], home=str(world["home"])
    )
    assert os.path.realpath(world["project"]) not in policy.deny_paths


def test_paths_whose_content_git_tracks_are_not_hidden(world: dict[str, Path]) -> None:
    project = os.path.realpath(world["project"])

    def tracked(root: str, paths: object) -> set[str]:
        assert root == project
        return {f"{project}/.env"}

    policy = build_policy(
        project=project, sensitive=[".env", ".env.*"], home=str(world["home"]), tracked=tracked
    )
    assert f"{project}/.env" not in policy.deny_paths
    assert f"{project}/sub/.env.local" in policy.deny_paths


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_tracked_asks_git(world: dict[str, Path]) -> None:
    project = os.path.realpath(world["project"])
    env = {"PATH": "/usr/bin:/bin", "GIT_CONFIG_GLOBAL": "/dev/null", "HOME": project}
    for args in (
        ["init", "-q"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "add", ".env"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"],
    ):
        subprocess.run(["git", "-C", project, *args], check=True, env=env)
    found = git_tracked(project, [f"{project}/.env", f"{project}/sub/.env.local", f"{project}/sub"])
    assert found == {f"{project}/.env"}
    assert git_tracked(str(world["home"]), [f"{world['home']}/.ssh"]) == set()  # no repo there


# --- bubblewrap arguments ----------------------------------------------------------------------


def _policy(**changes: object) -> SandboxPolicy:
    base: dict[str, object] = {
        "project": "/p",
        "write_roots": ("/p",),
        "deny_paths": ("/h/.ssh", "/h/.agent", "/p/.env", "/h/.agent/memory"),
        "deny_reasons": ("~/.ssh", "home", ".env", "memory"),
        "read_exceptions": ("/h/.ssh/known_hosts",),
        "tmp_dir": "/t/cmd",
    }
    base.update(changes)
    return SandboxPolicy(**base)  # type: ignore[arg-type]


def _pairs(args: list[str]) -> list[tuple[str, ...]]:
    """The options as tuples: (option, *its operands)."""
    arity = {"--ro-bind": 2, "--bind": 2, "--tmpfs": 1, "--remount-ro": 1, "--dev": 1}
    arity |= {"--proc": 1, "--cap-drop": 1}
    out: list[tuple[str, ...]] = []
    i = 0
    while i < len(args):
        n = arity.get(args[i], 0)
        out.append(tuple(args[i : i + 1 + n]))
        i += 1 + n
    return out


def test_bwrap_hides_denied_paths_and_binds_write_roots_in_order() -> None:
    files = {"/p/.env", "/h/.ssh/known_hosts"}
    args = bwrap_arguments(
        _policy(), stub_dir="/s/d", stub_file="/s/f", is_dir=lambda p: p not in files
    )
    pairs = _pairs(args)
    assert pairs[:3] == [("--ro-bind", "/", "/"), ("--dev", "/dev"), ("--proc", "/proc")]
    mounts = pairs[3:]
    # a folder with a visible file inside: tmpfs, the file, then read-only (after everything)
    assert ("--tmpfs", "/h/.ssh") in mounts
    assert ("--ro-bind", "/h/.ssh/known_hosts", "/h/.ssh/known_hosts") in mounts
    assert mounts.index(("--tmpfs", "/h/.ssh")) < mounts.index(
        ("--ro-bind", "/h/.ssh/known_hosts", "/h/.ssh/known_hosts")
    )
    assert ("--remount-ro", "/h/.ssh") in mounts
    # a folder with nothing visible inside: the unlistable stub; its own inner denial dropped
    assert ("--ro-bind", "/s/d", "/h/.agent") in mounts
    assert not any("/h/.agent/memory" in m for m in mounts)
    # a denied file inside a write root: the unreadable stub file, after the root's bind
    assert mounts.index(("--bind", "/p", "/p")) < mounts.index(("--ro-bind", "/s/f", "/p/.env"))
    assert ("--bind", "/t/cmd", "/t/cmd") in mounts
    assert ("--cap-drop", "ALL") in pairs
    for flag in ("--unshare-pid", "--unshare-net", "--die-with-parent", "--new-session"):
        assert (flag,) in pairs


def test_bwrap_keeps_the_network_when_granted_and_falls_back_without_stubs() -> None:
    args = bwrap_arguments(
        _policy(network=True, read_exceptions=()),
        stub_dir=None,
        stub_file=None,
        is_dir=lambda p: p != "/p/.env",
    )
    assert "--unshare-net" not in args
    pairs = _pairs(args)
    assert ("--tmpfs", "/h/.agent") in pairs
    assert ("--ro-bind", "/dev/null", "/p/.env") in pairs


def test_a_write_root_inside_a_denied_folder_stays_writable() -> None:
    policy = _policy(write_roots=("/h/.agent/work",), deny_paths=("/h/.agent",), read_exceptions=())
    pairs = _pairs(
        bwrap_arguments(policy, stub_dir="/s/d", stub_file="/s/f", is_dir=lambda p: True)
    )
    tmpfs = pairs.index(("--tmpfs", "/h/.agent"))
    bind = pairs.index(("--bind", "/h/.agent/work", "/h/.agent/work"))
    remount = pairs.index(("--remount-ro", "/h/.agent"))
    assert tmpfs < bind < remount


# --- Landlock rules ------------------------------------------------------------------------------


def _tree(paths: dict[str, PathKind]) -> tuple[object, object]:
    def list_dir(folder: str) -> list[str]:
        prefix = folder.rstrip("/") + "/"
        return sorted(
            {p[len(prefix) :].split("/")[0] for p in paths if p.startswith(prefix) and p != folder}
        )

    def kind(path: str) -> PathKind | None:
        return paths.get(path)

    return list_dir, kind


def test_landlock_grants_the_complement_of_denied_paths() -> None:
    tree: dict[str, PathKind] = {
        "/": "dir",
        "/usr": "dir",
        "/bin": "symlink",
        "/h": "dir",
        "/h/.ssh": "dir",
        "/h/.ssh/id": "file",
        "/h/.ssh/known_hosts": "file",
        "/h/.bashrc": "file",
        "/h/p": "dir",
        "/h/p/.env": "file",
        "/h/p/src": "dir",
        "/dev/null": "other",
    }
    list_dir, kind = _tree(tree)
    policy = SandboxPolicy(
        project="/h/p",
        write_roots=("/h/p",),
        deny_paths=("/h/.ssh", "/h/p/.env"),
        read_exceptions=("/h/.ssh/known_hosts",),
    )
    rules: dict[str, frozenset[str]] = {}
    for rule in landlock_rules(policy, list_dir=list_dir, kind=kind):  # type: ignore[arg-type]
        rules[rule.path] = rules.get(rule.path, frozenset()) | rule.rights
    assert rules["/"] == frozenset({"read_dir"})  # list only: a rule covers all below it
    assert rules["/h"] == frozenset({"read_dir"})
    assert rules["/usr"] == READ_RIGHTS
    assert "/bin" not in rules  # a symlink: its target is covered where it lives
    assert "/h/.ssh" not in rules and "/h/.ssh/id" not in rules
    assert rules["/h/.ssh/known_hosts"] == frozenset({"read_file"})
    assert rules["/h/.bashrc"] == frozenset({"execute", "read_file"})
    # inside a write root a denied file is not split out (new files there must stay usable)
    assert landlock_unenforced(policy) == ("/h/p/.env",)
    assert rules["/h/p"] == WRITE_RIGHTS
    assert "/h/p/.env" not in rules and "/h/p/src" not in rules
    assert rules["/dev/null"] == frozenset({"read_file", "write_file", "truncate"})


def test_landlock_without_denials_is_one_read_and_one_write_rule() -> None:
    list_dir, kind = _tree({"/": "dir", "/p": "dir"})
    policy = SandboxPolicy(project="/p", write_roots=("/p",))
    rules = landlock_rules(policy, list_dir=list_dir, kind=kind)  # type: ignore[arg-type]
    assert rules == [LandlockRule("/", READ_RIGHTS), LandlockRule("/p", WRITE_RIGHTS)]


# --- denials ---------------------------------------------------------------------------------


POLICY = SandboxPolicy(
    project="/p",
    write_roots=("/p",),
    deny_paths=("/h/.ssh", "/p/.env"),
    deny_reasons=("~/.ssh", "tools.sensitive_paths: .env"),
    read_exceptions=("/h/.ssh/known_hosts",),
    tmp_dir="/t/cmd",
)


@pytest.mark.parametrize(
    ("line", "mechanism", "kind", "path", "error"),
    [
        (
            "cat: /h/.ssh/id_rsa: No such file or directory",
            "bubblewrap",
            "read",
            "/h/.ssh/id_rsa",
            "ENOENT",
        ),
        ("cat: .env: Permission denied", "bubblewrap", "read", "/p/.env", "EACCES"),
        (
            "/bin/bash: line 1: /etc/x: Read-only file system",
            "bubblewrap",
            "write",
            "/etc/x",
            "EROFS",
        ),
        (
            "touch: cannot touch '/etc/x': Read-only file system",
            "bubblewrap",
            "write",
            "/etc/x",
            "EROFS",
        ),
        (
            "mkdir: cannot create directory ‘/opt/x’: Read-only file system",
            "bubblewrap",
            "write",
            "/opt/x",
            "EROFS",
        ),
        (
            "PermissionError: [Errno 13] Permission denied: '/h/.ssh/id_rsa'",
            "landlock",
            "read",
            "/h/.ssh/id_rsa",
            "EACCES",
        ),
        (
            "OSError: [Errno 30] Read-only file system: '/usr/x'",
            "bubblewrap",
            "write",
            "/usr/x",
            "EROFS",
        ),
        ("/bin/bash: line 1: /usr/x: Permission denied", "landlock", "write", "/usr/x", "EACCES"),
        (
            "cp: cannot create regular file '/p/.env': Permission denied",
            "landlock",
            "write",
            "/p/.env",
            "EACCES",
        ),
        (
            "cat: /proc/77/environ: Permission denied",
            "landlock",
            "read",
            "/proc/77/environ",
            "EACCES",
        ),
    ],
)
def test_denials_name_the_path_and_the_policy(
    line: str, mechanism: str, kind: str, path: str, error: str
) -> None:
    (denial,) = find_denials(line, POLICY, "/p", mechanism)  # type: ignore[arg-type]
    assert (denial.kind, denial.path, denial.error, denial.mechanism) == (
        kind,
        path,
        error,
        mechanism,
    )
    note = denial.note()
    assert note.startswith(f"[sandbox ({mechanism}) refused ")
    if path.startswith("/h/.ssh"):
        assert "~/.ssh" in note
    elif path == "/p/.env":
        assert "tools.sensitive_paths: .env" in note
    elif kind == "write":
        assert "commands may write only in /p, /t/cmd" in note


@pytest.mark.parametrize(
    "line",
    [
        "cat: /p/missing.txt: No such file or directory",  # really missing
        "cat: /root/x: Permission denied",  # bubblewrap does not refuse reads there: DAC
        "cat: /h/.ssh/known_hosts: No such file or directory",  # an exception
        "/bin/bash: line 1: /p/out: Read-only file system",  # inside a write root
        "all good",
    ],
)
def test_what_the_policy_does_not_explain_is_not_a_denial(line: str) -> None:
    assert find_denials(line, POLICY, "/p", "bubblewrap") == ()


def test_network_denials_only_without_a_grant() -> None:
    text = "ConnectionRefusedError: [Errno 111] Connection refused"
    (denial,) = find_denials(text, POLICY, "/p", "bubblewrap")
    assert (denial.kind, denial.error, denial.path) == ("network", "ECONNREFUSED", None)
    assert "no network" in denial.note()
    assert find_denials(text, POLICY.with_network(True), "/p", "bubblewrap") == ()
    seccomp = (
        '  File "/usr/lib/python3.11/socket.py", line 232, in __init__\n'
        "    _socket.socket.__init__(self, family, type, proto, fileno)\n"
        "PermissionError: [Errno 1] Operation not permitted"
    )
    (denial,) = find_denials(seccomp, POLICY, "/p", "landlock")
    assert (denial.kind, denial.error) == ("network", "EPERM")


def test_no_denials_without_a_mechanism_and_at_most_five() -> None:
    many = "\n".join(f"cat: /h/.ssh/k{i}: No such file or directory" for i in range(20))
    assert find_denials(many, POLICY, "/p", "none") == ()
    assert len(find_denials(many, POLICY, "/p", "bubblewrap")) == 5


# --- causes and fixes ----------------------------------------------------------------------------


def _facts(**changes: object) -> HostFacts:
    values: dict[str, object] = {"euid": 1000, "kernel": "6.8.0"}
    values.update(changes)
    return HostFacts(**values)  # type: ignore[arg-type]


def test_ubuntu_apparmor_restriction_is_named_with_its_sysctl_and_a_profile() -> None:
    cause, fix = explain_bwrap_failure(
        "bwrap: setting up uid map: Permission denied",
        _facts(apparmor_restrict_userns=1),
        binary="/usr/bin/bwrap",
    )
    assert "kernel.apparmor_restrict_unprivileged_userns = 1" in cause
    assert "setting up uid map" in cause
    assert "/etc/apparmor.d/" in fix and "/usr/bin/bwrap" in fix and "userns" in fix
    assert "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0" in fix


@pytest.mark.parametrize(
    ("facts", "message", "in_cause", "in_fix"),
    [
        (
            {"unprivileged_userns_clone": 0},
            "bwrap: No permissions to creating new namespace, likely because the kernel does "
            "not allow non-privileged user namespaces.",
            "kernel.unprivileged_userns_clone = 0",
            "sysctl -w kernel.unprivileged_userns_clone=1",
        ),
        (
            {"max_user_namespaces": 0},
            "bwrap: Creating new namespace failed: No space left on device",
            "user.max_user_namespaces = 0",
            "user.max_user_namespaces=15000",
        ),
        (
            {},
            "bwrap: loopback: Failed RTM_NEWADDR: Operation not permitted",
            "loopback",
            "CAP_NET_ADMIN",
        ),
        (
            {"container": "docker"},
            "bwrap: Creating new namespace failed: Operation not permitted",
            "docker container",
            "seccomp=unconfined",
        ),
        (
            {"euid": 0},
            "bwrap: Creating new namespace failed: Operation not permitted",
            "refuses new (user) namespaces",
            "",
        ),
    ],
)
def test_bwrap_failures_get_a_cause_and_a_fix(
    facts: dict[str, object], message: str, in_cause: str, in_fix: str
) -> None:
    cause, fix = explain_bwrap_failure(message, _facts(**facts), binary="bwrap")
    assert in_cause in cause
    assert in_fix in fix


def test_landlock_failures_get_a_cause_and_a_fix() -> None:
    cause, fix = explain_landlock_failure(errno.EOPNOTSUPP, _facts(lsm="lockdown,yama,apparmor"))
    assert "not enabled at boot" in cause and "lockdown,yama,apparmor" in cause
    assert "lsm=" in fix
    cause, fix = explain_landlock_failure(errno.ENOSYS, _facts(kernel="5.4.0"))
    assert "5.4.0" in cause and "5.13" in cause
    cause, _ = explain_landlock_failure(errno.ENOSYS, _facts(container="docker"))
    assert "docker container" in cause


# --- the modes -----------------------------------------------------------------------------------

NOTHING_WORKS = SandboxProbe(
    (
        MechanismStatus("bubblewrap", False, cause="userns refused", fix="sysctl A"),
        MechanismStatus("landlock", False, cause="no Landlock", fix="kernel B"),
    )
)


async def test_required_without_a_mechanism_refuses_every_command() -> None:
    choice = choose_sandbox("required", probe=NOTHING_WORKS)
    assert isinstance(choice.sandbox, RefusingSandbox)
    assert choice.warning is None
    started: list[object] = []

    async def start(argv: object) -> None:
        started.append(argv)

    with pytest.raises(SandboxUnavailable) as caught:
        await choice.sandbox.run(["true"], POLICY, start)
    assert started == []
    text = str(caught.value)
    assert 'sandbox.os = "required"' in text
    assert "userns refused" in text and "no Landlock" in text
    assert "sysctl A" in text and "kernel B" in text


async def test_auto_without_a_mechanism_runs_unsandboxed_and_says_so_once() -> None:
    choice = choose_sandbox("auto", probe=NOTHING_WORKS)
    assert isinstance(choice.sandbox, NoSandbox)
    assert choice.sandbox.unsandboxed and choice.sandbox.mechanism == "none"
    assert choice.warning is not None
    assert "NO OS SANDBOX" in choice.warning and "UNSANDBOXED" in choice.warning
    assert "userns refused" in choice.warning and "\n" not in choice.warning
    assert warning_once(choice) == choice.warning
    assert warning_once(choice) is None

    async def start(argv: object) -> object:
        return argv

    assert await choice.sandbox.run(["true"], POLICY, start) == ["true"]


def test_off_is_explicit_and_probes_nothing() -> None:
    choice = choose_sandbox("off")
    assert isinstance(choice.sandbox, NoSandbox)
    assert choice.probe is None and choice.warning is None
    assert choice.sandbox.unsandboxed
    assert "off" in choice.sandbox.reason


def test_the_best_working_mechanism_is_chosen() -> None:
    landlock_only = SandboxProbe(
        (
            MechanismStatus("bubblewrap", False, cause="userns refused"),
            MechanismStatus("landlock", True),
        )
    )
    for mode in ("auto", "required"):
        choice = choose_sandbox(mode, probe=landlock_only)  # type: ignore[arg-type]
        assert isinstance(choice.sandbox, LandlockSandbox)
        assert choice.warning is None
