"""Python functions as tools (the SDK's `@tool` and `AgentRuntime(tools=[...])`).

A typed function (sync or async) becomes a `Tool`: its JSON schema comes from the signature and
the docstring through pydantic, so the model's arguments are validated like a built-in tool's;
it declares a permission class and, optionally, which argument is its target (a path, a command
or a URL) so that allow/deny rules and session grants apply to it; and it runs through the same
pipeline as the built-ins: permissions, the sandbox for a path target, artifacts for big
results, events. A sync function runs in a worker thread so it never blocks the loop.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, create_model

from soong_agent.application.tools.base import Tool, ToolArgs, ToolContext, ToolOutput
from soong_agent.ports.approval import PermissionClass

TargetKind = Literal["path", "command", "url"]
PermissionName = Literal["read_only", "read", "write", "exec", "network"]
_PERMISSIONS: dict[str, PermissionClass] = {
    "read_only": "read_only",
    "read": "read_only",
    "write": "write",
    "exec": "exec",
    "network": "network",
}
_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_ARGS_HEADER = re.compile(r"^\s*(Args|Arguments|Parameters)\s*:\s*$")
_ARG_LINE = re.compile(r"^\s+(\*{0,2}[A-Za-z_]\w*)\s*(\([^)]*\))?\s*:\s*(.*)$")


@dataclass(frozen=True)
class FunctionTool:
    """A Python function the agent may call; made by `tool`. Calling it calls the function."""

    function: Callable[..., Any]
    name: str
    description: str
    permission_class: PermissionClass
    args_model: type[BaseModel]
    target: str | None = None
    target_kind: TargetKind | None = None
    context_param: str | None = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)

    @functools.cached_property
    def _is_async(self) -> bool:  # (looked up once, not on every call)
        return inspect.iscoroutinefunction(self.function)

    def as_tool(self) -> Tool:
        """The tool the runtime registers."""
        return Tool(
            name=self.name,
            description=self.description,
            args_model=self.args_model,
            handler=self._handle,
            permission_class=self.permission_class,
            describe=self._describe,
            target_field=self.target,
            target_kind=self.target_kind,
        )

    def _describe(self, args: Any, ctx: ToolContext) -> tuple[str, str]:
        shown = ", ".join(f"{k}={_short(v)}" for k, v in _values(args).items())
        return "*", f"call {self.name}({shown})"

    async def _handle(self, args: Any, ctx: ToolContext) -> ToolOutput:
        kwargs = _values(args)
        if self.target is not None and self.target_kind == "path":
            path = kwargs.get(self.target)
            if isinstance(path, str):  # the sandbox checks a declared path like a file tool's
                if self.permission_class == "read_only":
                    ctx.fs.check_read(path)
                else:
                    ctx.fs.check_write(path)
        if self.context_param is not None:
            kwargs[self.context_param] = ctx
        if self._is_async:
            result = await self.function(**kwargs)
        else:
            result = await asyncio.to_thread(self.function, **kwargs)
        return _output(result)


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    permission: PermissionName = "read_only",
    target: str | None = None,
    target_kind: TargetKind = "path",
) -> Any:
    """Make a typed function a tool: ``@tool`` or ``@tool(permission="write", target="path")``.

    Args:
        function: the function (when used as a bare decorator).
        name: the tool's name (default: the function's), ``[a-zA-Z0-9_-]{1,64}``.
        description: what the model is told (default: the docstring's first paragraph).
        permission: ``"read_only"`` (or ``"read"``), ``"write"``, ``"exec"`` or ``"network"``:
            how the permission policy treats a call (read-only tools are allowed by default,
            the others ask).
        target: the argument that names what a call acts on, so that rules such as
            ``my_tool(/docs/**)`` and session grants apply; a path target is also checked by
            the sandbox (write roots, sensitive paths) before the function runs.
        target_kind: what `target` is: ``"path"``, ``"command"`` or ``"url"``.

    A parameter annotated `ToolContext` receives the call's context (the sandboxed project
    filesystem, session and run ids) and is not shown to the model. The function may return a
    string, a `ToolOutput`, a pydantic model, or anything JSON can encode; an exception it
    raises becomes an error result the model sees.

    Raises:
        TypeError: a parameter without a type annotation, or ``*args``/``**kwargs``.
        ValueError: an invalid name, permission or target.
    """

    def make(fn: Callable[..., Any]) -> FunctionTool:
        return _build(fn, name, description, permission, target, target_kind)

    return make(function) if function is not None else make


def _build(
    fn: Callable[..., Any],
    name: str | None,
    description: str | None,
    permission: str,
    target: str | None,
    target_kind: TargetKind,
) -> FunctionTool:
    tool_name = name or fn.__name__
    if not _NAME.fullmatch(tool_name):
        raise ValueError(f"tool name {tool_name!r} must match [a-zA-Z0-9_-]{{1,64}}")
    if permission not in _PERMISSIONS:
        raise ValueError(
            f"permission {permission!r} of tool {tool_name!r}: expected one of "
            f"{', '.join(_PERMISSIONS)}"
        )
    if target_kind not in get_args(TargetKind):
        raise ValueError(f"target_kind {target_kind!r}: expected path, command or url")
    summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
    fields, context_param = _fields(fn, tool_name, arg_docs)
    if target is not None and target not in fields:
        raise ValueError(f"target {target!r} is not a parameter of tool {tool_name!r}")
    model = create_model(f"{tool_name}_args", __base__=ToolArgs, **fields)
    return FunctionTool(
        function=fn,
        name=tool_name,
        description=description or summary or f"Call the Python function {fn.__name__}.",
        permission_class=_PERMISSIONS[permission],
        args_model=model,
        target=target,
        target_kind=target_kind if target is not None else None,
        context_param=context_param,
    )


def _fields(
    fn: Callable[..., Any], tool_name: str, docs: dict[str, str]
) -> tuple[dict[str, Any], str | None]:
    hints = _parameter_hints(fn, tool_name)
    fields: dict[str, Any] = {}
    context_param: str | None = None
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(
                f"tool {tool_name!r}: parameter {param.name!r} must be a plain or keyword "
                "parameter (no *args, **kwargs or positional-only)"
            )
        if param.name not in hints:
            raise TypeError(f"tool {tool_name!r}: parameter {param.name!r} needs a type annotation")
        annotation = hints[param.name]
        if annotation is ToolContext:
            context_param = param.name
            continue
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[param.name] = (annotation, Field(default, description=docs.get(param.name)))
    return fields, context_param


def _parameter_hints(fn: Callable[..., Any], tool_name: str) -> dict[str, Any]:
    """The parameters' annotations, evaluated (string annotations too); the return annotation
    is not needed and may name a class the function's module cannot see."""
    cells = (c.cell_contents for c in fn.__closure__ or ())
    closure = dict(zip(fn.__code__.co_freevars, cells, strict=False))
    hints: dict[str, Any] = {}
    for name, written in inspect.get_annotations(fn).items():
        if name == "return":
            continue
        try:
            hints[name] = (
                eval(written, fn.__globals__, closure) if isinstance(written, str) else written
            )
        except Exception as exc:  # any error naming a type is the caller's to fix
            raise TypeError(
                f"tool {tool_name!r}: the annotation {written!r} of parameter {name!r} cannot "
                f"be resolved ({type(exc).__name__}: {exc})"
            ) from exc
    return hints


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The first paragraph, and the Google-style ``Args:`` descriptions by name."""
    lines = doc.splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _ARGS_HEADER.match(line):
            break
        summary.append(line.strip())
    docs: dict[str, str] = {}
    current: str | None = None
    arg_indent: int | None = None
    in_args = False
    for line in lines:
        if _ARGS_HEADER.match(line):
            in_args, current, arg_indent = True, None, None
            continue
        if not in_args or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            in_args = False  # the next section
            continue
        match = _ARG_LINE.match(line)
        if match is not None and (arg_indent is None or indent <= arg_indent):
            arg_indent = indent
            current = match.group(1).lstrip("*")
            docs[current] = match.group(3).strip()
        elif current is not None:
            docs[current] = f"{docs[current]} {line.strip()}".strip()
    return " ".join(summary), docs


def _values(args: Any) -> dict[str, Any]:
    """The validated arguments by name (a copy: the caller may add to it). `args` is an
    instance of the tool's arguments model (`ToolArgs`: no extras), whose fields are exactly
    the keys of its `__dict__`."""
    return dict(args.__dict__)


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:39] + "…"


def _output(result: Any) -> ToolOutput:
    if isinstance(result, ToolOutput):
        return result
    if isinstance(result, str):
        return ToolOutput(result)
    if result is None:
        return ToolOutput("(the function returned nothing)")
    if isinstance(result, BaseModel):
        return ToolOutput(result.model_dump_json())
    return ToolOutput(json.dumps(result, ensure_ascii=False, default=str))
