"""`soong-agent agents list|show ID`: the agent definitions (AGT-1).

The built-ins and the home's `${SOONG_AGENT_HOME}/agents/<id>.md` files (a project's folder is
never read). `list` prints, per definition, its id and description, then its source (`built-in`
or the file) and its tool ceiling; `show` prints one whole
definition, its prompt section last. Every file that was skipped, and why, goes to stderr;
`list` exits 1 when any was (so a script can check an agents folder), else 0. `show` of an id
no definition has exits 2, listing the known ids.
"""

from __future__ import annotations

import sys

from soong_agent.domain.agents import unknown_agent_message
from soong_agent.entrypoints.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, fail, guarded
from soong_agent.ports.agents import AgentDefinition, AgentSource


def _tools(definition: AgentDefinition) -> str:
    return ", ".join(definition.tools) if definition.tools else "(none)"


def render_agents(source: AgentSource, folder: str) -> list[str]:
    """The lines `agents list` prints on stdout."""
    definitions = source.definitions()
    files = sum(1 for d in definitions if not d.builtin)
    lines = [f"{len(definitions)} agents ({files} from {folder}):"]
    for definition in definitions:
        lines.append(f"{definition.id}  {definition.description}")
        lines.append(f"    source: {definition.source}")
        lines.append(f"    tools: {_tools(definition)}")
    return lines


def render_agent(definition: AgentDefinition) -> list[str]:
    """The lines `agents show` prints on stdout: every field, then the prompt section."""
    lines = [
        f"id: {definition.id}",
        f"description: {definition.description}",
        f"source: {definition.source}",
        f"content_hash: sha256:{definition.content_hash}",
        f"tools (a ceiling): {_tools(definition)}",
        f"model_profile: {definition.model_profile or '(the main model)'}",
        "max_turns: "
        + (str(definition.max_turns) if definition.max_turns is not None else "(the config's)"),
        "permission_mode: " + (definition.permission_mode or "(the config's)"),
        "skills: " + (", ".join(definition.skills) if definition.skills else "(all of the home's)"),
        "prompt:",
    ]
    if definition.prompt:
        lines += ["    " + line if line else "" for line in definition.prompt.split("\n")]
    else:
        lines.append("    (none)")
    return lines


def _warn(source: AgentSource) -> list[str]:
    warnings = source.warnings()
    for warning in warnings:
        sys.stderr.write(f"soong-agent: warning: {warning}\n")
    return warnings


def report_agents(source: AgentSource, folder: str) -> int:
    """Print the definitions (stdout) and the warnings (stderr); 1 when any file was skipped."""
    sys.stdout.write("".join(line + "\n" for line in render_agents(source, folder)))
    return EXIT_FAILED if _warn(source) else EXIT_OK


def report_agent(source: AgentSource, agent_id: str) -> int:
    """Print one definition (stdout) and the warnings (stderr); 2 for an unknown id."""
    _warn(source)
    definition = source.get(agent_id)
    if definition is None:
        known = [d.id for d in source.definitions()]
        return fail(unknown_agent_message(agent_id, known), EXIT_USAGE)
    sys.stdout.write("".join(line + "\n" for line in render_agent(definition)))
    return EXIT_OK


def agents_list(path: str | None = None) -> int:
    """`soong-agent agents list [--path P]`: the config is loaded as for a run (for the home;
    a configuration mistake exits 2), then every agent definition is listed."""
    from soong_agent.adapters.agents import HomeAgentSource
    from soong_agent.entrypoints.sdk import load

    def body() -> int:
        source = HomeAgentSource(load(path, None).home)
        return report_agents(source, str(source.folder))

    return guarded(body)


def agents_show(agent_id: str, path: str | None = None) -> int:
    """`soong-agent agents show ID [--path P]`: one whole definition; an unknown id exits 2."""
    from soong_agent.adapters.agents import HomeAgentSource
    from soong_agent.entrypoints.sdk import load

    def body() -> int:
        return report_agent(HomeAgentSource(load(path, None).home), agent_id)

    return guarded(body)
