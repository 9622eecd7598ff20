"""Declarative tools (TOOL-3): a JSON definition becomes a Tool that runs one argv template.

The arguments are checked against a pydantic model built from the definition's JSON schema and
placed into the argv as whole items; nothing goes through a shell, so `; rm -rf x` or
`$(touch f)` in an argument is just text the program receives. The program is looked up on a
PATH that holds only absolute folders (`shell.command_env`), never in the project.
"""

from __future__ import annotations

import copy
import json
import shlex
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model

from soong_agent.application.tools.base import Tool, ToolContext, ToolOutput
from soong_agent.application.tools.catalog import effective_timeout_ms
from soong_agent.application.tools.shell import command_env, format_result
from soong_agent.domain.config.schema import ToolsConfig
from soong_agent.ports.process import ProcessRunner
from soong_agent.ports.tools import DeclarativeParameter, DeclarativeToolSpec

SUMMARY_MAX_CHARS = 300

_SCALARS: dict[str, Any] = {"string": str, "integer": int, "number": int | float, "boolean": bool}
_FIELD_KEYWORDS = {
    "minLength": "min_length",
    "maxLength": "max_length",
    "minItems": "min_length",
    "maxItems": "max_length",
    "pattern": "pattern",
    "minimum": "ge",
    "maximum": "le",
    "exclusiveMinimum": "gt",
    "exclusiveMaximum": "lt",
}


def _annotation(param: DeclarativeParameter) -> Any:
    if param.enum is not None:
        return Literal[param.enum]
    if param.type == "array":
        item = _SCALARS[param.items] if param.items else str | int | float | bool
        return list[item]  # type: ignore[valid-type]
    return _SCALARS[param.type]


def _field(param: DeclarativeParameter) -> tuple[Any, Any]:
    kwargs: dict[str, Any] = {"alias": param.name, "description": param.description}
    for keyword, value in param.constraints:
        kwargs[_FIELD_KEYWORDS[keyword]] = value
    if param.type == "number" and param.enum is None:
        kwargs["allow_inf_nan"] = False
    annotation = _annotation(param)
    if param.required:
        return annotation, Field(**kwargs)
    if param.has_default and param.default is not None:
        default = param.default
        return annotation, Field(default_factory=lambda: copy.deepcopy(default), **kwargs)
    return annotation | None, Field(default=None, **kwargs)


def args_model(spec: DeclarativeToolSpec) -> type[BaseModel]:
    """A pydantic model of the tool's arguments; its JSON schema is the definition's own."""
    shown = spec.schema

    def show_declared_schema(schema: dict[str, Any]) -> None:
        schema.clear()
        schema.update(copy.deepcopy(shown))

    config = ConfigDict(
        extra="forbid", regex_engine="python-re", json_schema_extra=show_declared_schema
    )
    # Fields get neutral names and the declared ones as aliases, so a parameter called `json`
    # or `model_config` cannot clash with pydantic's own attributes.
    fields = {f"arg{i}": _field(p) for i, p in enumerate(spec.parameters)}
    model: type[BaseModel] = create_model(  # type: ignore[call-overload]
        f"{spec.name}_args", __config__=config, **fields
    )
    return model


def _argv_item(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def build_argv(spec: DeclarativeToolSpec, args: BaseModel) -> list[str]:
    """The command with each `{name}` item replaced by its argument as one whole item.

    Strings go in as they are, other values as JSON text (`true`, `3`, `["a", "b"]`); the item
    of an optional argument that was not given (and has no default) is left out.
    """
    values = args.model_dump(by_alias=True)
    argv: list[str] = []
    for item in spec.command:
        name = spec.placeholder(item)
        if name is None:
            argv.append(item)
        elif values.get(name) is not None:
            argv.append(_argv_item(values[name]))
    return argv


def _summary(argv: Sequence[str]) -> str:
    text = "run " + shlex.join(argv)
    if len(text) > SUMMARY_MAX_CHARS:
        return text[: SUMMARY_MAX_CHARS - 3] + "..."
    return text


def declarative_tool(
    spec: DeclarativeToolSpec,
    *,
    runner: ProcessRunner,
    project: str,
    tools: ToolsConfig,
    env: Mapping[str, str],
    secret_names: Collection[str] = (),
) -> Tool:
    """The Tool for one definition: runs its argv in `project` through `runner`.

    The timeout is `effective_timeout_ms` (override, else the definition's, else the default;
    capped at `tools.max_timeout_ms`); the process gets the same environment as run_command
    (`shell.command_env`: the allow-listed variables of `env`, never a credential, nor one of
    `secret_names`; PATH without relative or empty entries, so a program named by the template
    is never one planted in the project); stdout and stderr are cut at the configured limits
    and the result reads like run_command's.
    """
    timeout_ms = effective_timeout_ms(spec.name, spec.timeout_ms, tools)
    process_env = command_env(
        env, tools.env_allowlist, secret_names=frozenset(secret_names), home=project
    )
    stdout_limit, stderr_limit = tools.stdout_limit_bytes, tools.stderr_limit_bytes

    def describe(args: BaseModel, ctx: ToolContext) -> tuple[str, str]:
        return "*", _summary(build_argv(spec, args))

    async def handler(args: BaseModel, ctx: ToolContext) -> ToolOutput:
        argv = build_argv(spec, args)
        if any("\x00" in item for item in argv):
            return ToolOutput("an argument contains a NUL character; nothing was run", True)
        try:
            result = await runner.run(
                argv,
                cwd=project,
                env=process_env,
                timeout_s=timeout_ms / 1000,
                stdout_limit=stdout_limit,
                stderr_limit=stderr_limit,
            )
        except OSError as exc:
            return ToolOutput(f"{argv[0]} could not be started: {exc}", is_error=True)
        failed = result.timed_out or result.exit_code != 0
        return ToolOutput(
            format_result(result, timeout_ms=timeout_ms), is_error=failed, denials=result.denials
        )

    return Tool(
        name=spec.name,
        description=spec.description,
        args_model=args_model(spec),
        handler=handler,
        permission_class=spec.permission_class,
        describe=describe,
        timeout_ms=timeout_ms,
    )


def add_declarative_tools(
    tools: Sequence[Tool],
    specs: Sequence[DeclarativeToolSpec],
    *,
    runner: ProcessRunner,
    project: str,
    config: ToolsConfig,
    env: Mapping[str, str],
    secret_names: Collection[str] = (),
) -> tuple[list[Tool], list[str]]:
    """`tools` followed by a Tool per definition, and one line per definition left out.

    A definition whose name is already taken by one of `tools` is skipped and reported as
    `<file>: name: …`; the built-in tool stays.
    """
    out = list(tools)
    taken = {t.name for t in out}
    problems: list[str] = []
    for spec in specs:
        if spec.name in taken:
            problems.append(
                f"{spec.source or spec.name}: name: {spec.name!r} is already a tool; "
                "this definition is skipped"
            )
            continue
        taken.add(spec.name)
        out.append(
            declarative_tool(
                spec,
                runner=runner,
                project=project,
                tools=config,
                env=env,
                secret_names=secret_names,
            )
        )
    return out, problems
