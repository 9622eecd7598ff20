"""Plans (PLAN-1): `plan_write`, `plan_read`, `plan_list` over Markdown files in `plan.default_dir`.

A plan is ``<plan.default_dir>/<name>.md`` (default ``<project>/.soong-agent/plans``; the folder
is created by the first write). The model names it; the core only checks the name: a slug of
lowercase letters, digits and ``-``, starting with a letter or digit, at most 64 characters —
no separators, no dots, so a name can never leave the folder. A new plan whose content is empty
starts from the built-in template named by `plan.template_name` (Goal / Steps / Risks / Done
when).

Ownership: the first line of every plan file written here is an HTML comment naming the session
that wrote it, ``<!-- soong-agent plan; session: ses_… -->`` (invisible when the Markdown is
rendered; `plan_read` hides it, and a marker line in the model's content is dropped, so nobody
can claim a plan by writing one). Writing over an existing plan that another session wrote —
or that has no marker (a person wrote it) — is refused as ``path_conflict`` unless the call
says ``overwrite=true``. Every read and write goes through the `FileSystem` port, so the sandbox
checks a plan like any other file (a `plan.default_dir` outside the write roots is refused).

Inside the project no plan goes through a symbolic link: when the plans folder lies in the
project, a link on its way from the project (``.soong-agent`` or ``.soong-agent/plans`` shipped
as a link by the repository) or a plan file that is a link is refused with `SandboxViolation`
naming it. Else a plan write could land wherever the link points — a source file of the project
in plan mode, which writes nothing else (PLAN-2). A `plan.default_dir` the user set outside the
project is their own folder and taken as it is.
"""

from __future__ import annotations

import posixpath
import re

from pydantic import Field, field_validator

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput
from soong_agent.domain.config.schema import PlanConfig
from soong_agent.domain.permissions.targets import is_within, relative_parts
from soong_agent.ports.errors import ConfigError, SandboxViolation

__all__ = [
    "PLAN_NAME_RULE",
    "PLAN_TEMPLATES",
    "PlanFile",
    "PlanStore",
    "check_plan_name",
    "plan_tools",
]

MAX_NAME = 64
PLAN_NAME_RULE = (
    "a plan name is a slug: lowercase letters a-z, digits 0-9 and '-', starting with a letter "
    f"or digit, at most {MAX_NAME} characters; no '/', no '\\\\', no '.' (e.g. 'refactor-auth')"
)
_NAME = re.compile(rf"[a-z0-9][a-z0-9-]{{0,{MAX_NAME - 1}}}")
_MARKER = re.compile(r"^<!--\s*soong-agent plan;\s*session:\s*(\S*)\s*-->\s*$")
MAX_PLANS_LISTED = 200
HEAD_BYTES = 2_048

PLAN_TEMPLATES: dict[str, str] = {
    "default": (
        "# Plan: {name}\n"
        "\n"
        "## Goal\n"
        "\n"
        "What should be true when this is done, in one or two sentences.\n"
        "\n"
        "## Steps\n"
        "\n"
        "1. \n"
        "\n"
        "## Risks\n"
        "\n"
        "- \n"
        "\n"
        "## Done when\n"
        "\n"
        "- \n"
    ),
}
"""The built-in plan templates by `plan.template_name`; ``{name}`` becomes the plan's name."""


def check_plan_name(name: str) -> str:
    """`name` if it is a valid plan name; else ValueError naming the rule."""
    if not _NAME.fullmatch(name):
        raise ValueError(f"invalid plan name {name!r}: {PLAN_NAME_RULE}")
    return name


def _marker(session_id: str) -> str:
    return f"<!-- soong-agent plan; session: {session_id} -->"


class PlanFile:
    """A plan file's text split into its owner (the session in its marker line; None: no
    marker) and its body."""

    __slots__ = ("body", "owner")

    def __init__(self, text: str) -> None:
        first, newline, rest = text.partition("\n")
        match = _MARKER.match(first)
        self.owner: str | None = match.group(1) if match else None
        self.body: str = rest if match and newline else ("" if match else text)


def _without_markers(content: str) -> str:
    """The model's content with any ownership marker line taken out."""
    return "\n".join(line for line in content.splitlines() if not _MARKER.match(line))


class PlanStore:
    """The plans of one `plan.default_dir`, read and written through each call's `ctx.fs`."""

    def __init__(self, config: PlanConfig) -> None:
        template = PLAN_TEMPLATES.get(config.template_name)
        if template is None:
            known = ", ".join(sorted(PLAN_TEMPLATES))
            raise ConfigError(
                f"plan.template_name: unknown template {config.template_name!r}; "
                f"the built-in templates are: {known}"
            )
        self.directory = config.default_dir.rstrip("/") or config.default_dir
        self.template = template

    def path(self, name: str) -> str:
        """The file of the plan `name` (a checked name)."""
        return posixpath.join(self.directory, check_plan_name(name) + ".md")

    def check_links(self, path: str, ctx: ToolContext) -> None:
        """SandboxViolation naming the link when `path` (the plans folder or a plan file) lies
        in the project and it, or a folder on its way from the project, is a symbolic link."""
        fs = ctx.fs
        facts = fs.path_facts(path)
        if facts.resolved == facts.lexical or not is_within(facts.lexical, fs.root):
            return  # no link on the way, or not the project's
        parts = relative_parts(facts.lexical, fs.root)
        for end in range(1, len(parts) + 1):
            step = fs.path_facts(posixpath.join(fs.root, *parts[:end]))
            if step.resolved != step.lexical:
                raise SandboxViolation(
                    f"{fs.display_path(step.lexical)} is a symbolic link; soong-agent keeps "
                    "its plans only in real folders and files inside the project: remove the link"
                )

    async def load(self, name: str, ctx: ToolContext) -> PlanFile | None:
        """The plan `name`, or None when there is no such file."""
        self.check_links(self.path(name), ctx)
        try:
            data = await ctx.fs.read_bytes(self.path(name))
        except FileNotFoundError:
            return None
        return PlanFile(data.decode("utf-8", errors="replace"))

    async def names(self, ctx: ToolContext) -> tuple[list[str], bool]:
        """The plans' names, sorted, and whether the list was cut; none when the folder does
        not exist yet."""
        self.check_links(self.directory, ctx)
        try:
            entries, cut = await ctx.fs.list_dir(self.directory, limit=MAX_PLANS_LISTED)
        except FileNotFoundError:
            return [], False
        names = []
        for entry in entries:
            stem, dot, ext = posixpath.basename(entry.path).rpartition(".")
            if not entry.is_dir and dot and ext == "md" and _NAME.fullmatch(stem):
                names.append(stem)
        return names, cut

    # --- the tools' handlers ----------------------------------------------------------------

    async def write(self, args: PlanWriteArgs, ctx: ToolContext) -> ToolOutput:
        path = self.path(args.name)
        shown = ctx.fs.display_path(path)
        existing = await self.load(args.name, ctx)
        if existing is not None and existing.owner != ctx.session_id and not args.overwrite:
            who = (
                f"another session ({existing.owner})"
                if existing.owner
                else "someone else (it has no soong-agent session marker)"
            )
            return ToolOutput(
                f"path_conflict: the plan {args.name!r} ({shown}) exists and was written by "
                f"{who}; nothing was written. Choose another name, or call plan_write with "
                "overwrite=true to replace it.",
                is_error=True,
            )
        content = _without_markers(args.content).strip("\n")
        if not content.strip() and existing is not None:
            return ToolOutput(
                f"the plan {args.name!r} ({shown}) exists and the content is empty; nothing was "
                "written. Pass the whole new text of the plan.",
                is_error=True,
            )
        from_template = not content.strip()
        body = self.template.format(name=args.name) if from_template else content + "\n"
        await ctx.fs.write_text(path, _marker(ctx.session_id) + "\n" + body)
        lines = body.count("\n")
        how = "created from the template" if from_template else "written"
        verb = "replaced" if existing is not None else how
        tail = " Fill in its sections with plan_write." if from_template else ""
        return ToolOutput(f"Plan {args.name!r} {verb}: {shown} ({lines} lines).{tail}")

    async def read(self, args: PlanReadArgs, ctx: ToolContext) -> ToolOutput:
        plan = await self.load(args.name, ctx)
        shown = ctx.fs.display_path(self.path(args.name))
        if plan is None:
            names, _ = await self.names(ctx)
            known = ", ".join(names) if names else "none yet"
            return ToolOutput(
                f"no plan named {args.name!r} ({shown}); the plans are: {known}", is_error=True
            )
        return ToolOutput(f"Plan {args.name!r} ({shown}, {self._whose(plan, ctx)}):\n{plan.body}")

    async def list_plans(self, args: PlanListArgs, ctx: ToolContext) -> ToolOutput:
        names, cut = await self.names(ctx)
        shown = ctx.fs.display_path(self.directory)
        if not names:
            return ToolOutput(f"No plans yet in {shown}.")
        lines = [f"Plans in {shown}:"]
        for name in names:
            try:
                self.check_links(self.path(name), ctx)
            except SandboxViolation:
                lines.append(f"- {name}: [a symbolic link: not read]")
                continue
            data = await ctx.fs.read_bytes(self.path(name), max_bytes=HEAD_BYTES)
            plan = PlanFile(data.decode("utf-8", errors="replace"))
            title = next((line.strip() for line in plan.body.splitlines() if line.strip()), "")
            lines.append(f"- {name}: {title[:100] or '(empty)'} [{self._whose(plan, ctx)}]")
        if cut:
            lines.append(f"[only the first {MAX_PLANS_LISTED} entries of the folder were read]")
        return ToolOutput("\n".join(lines))

    @staticmethod
    def _whose(plan: PlanFile, ctx: ToolContext) -> str:
        if plan.owner == ctx.session_id:
            return "written by this session"
        if plan.owner:
            return f"written by session {plan.owner}"
        return "not written by soong-agent"


class _NamedPlan(ToolArgs):
    @field_validator("name", check_fields=False)
    @classmethod
    def _slug(cls, value: str) -> str:
        return check_plan_name(value)


class PlanWriteArgs(_NamedPlan):
    name: str = Field(description="The plan's name: a slug such as 'refactor-auth'.")
    content: str = Field(
        default="",
        description="The whole Markdown text of the plan; it replaces the previous text. Empty "
        "for a new plan: it starts from the template (Goal / Steps / Risks / Done when).",
    )
    overwrite: bool = Field(
        default=False,
        description="Replace a plan another session wrote (refused as path_conflict otherwise).",
    )


class PlanReadArgs(_NamedPlan):
    name: str = Field(description="The plan's name.")


class PlanListArgs(ToolArgs):
    pass


def plan_tools(config: PlanConfig) -> list[Tool]:
    """`plan_write`, `plan_read` and `plan_list` over the plans of `config.default_dir` (with
    its placeholders already expanded). ConfigError for an unknown `plan.template_name`."""
    store = PlanStore(config)

    def describe_write(args: PlanWriteArgs, ctx: ToolContext) -> tuple[str, str]:
        shown = ctx.fs.display_path(store.path(args.name))
        how = " (overwrite)" if args.overwrite else ""
        return "*", f"write the plan {args.name} to {shown}{how}"

    def describe_read(args: PlanReadArgs, ctx: ToolContext) -> tuple[str, str]:
        return "*", f"read the plan {args.name}"

    def describe_list(args: PlanListArgs, ctx: ToolContext) -> tuple[str, str]:
        return "*", f"list the plans in {ctx.fs.display_path(store.directory)}"

    return [
        Tool(
            name="plan_write",
            description=(
                "Write a plan: a Markdown file in the project's plans folder, named by a slug "
                "(lowercase letters, digits, '-'). Empty content starts a new plan from the "
                "template (Goal / Steps / Risks / Done when). A plan of another session is "
                "refused (path_conflict) unless overwrite is true."
            ),
            args_model=PlanWriteArgs,
            handler=store.write,
            permission_class="write",
            describe=describe_write,
        ),
        Tool(
            name="plan_read",
            description="Read a plan by its name.",
            args_model=PlanReadArgs,
            handler=store.read,
            describe=describe_read,
        ),
        Tool(
            name="plan_list",
            description="List the plans: name, first line, and which session wrote each.",
            args_model=PlanListArgs,
            handler=store.list_plans,
            describe=describe_list,
        ),
    ]
