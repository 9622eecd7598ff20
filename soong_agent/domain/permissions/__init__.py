"""Permissions as one subsystem (PERM-1…4, SBX-1, SBX-2): rules, grants, the decision, paths.

- `rules`: the rule syntax (`Tool`, `Tool(prefix:…)`, `Tool(<glob>)`, `Tool(domain:…)`);
- `programs`: option tables, what turns a reader into a writer or executor (PERM-4), and the
  global options normalised away before rules match;
- `targets`: path globs, anchored paths, URL hosts, the one domain pattern syntax (what rules
  and `tools.network.allowed_domains` match against);
- `decision`: the ordered `Outcome` (allow < ask < deny, strictest wins), `Verdict`, the mode;
- `request`: one tool call as the policy sees it;
- `grants`: `allow_for_session` grants and their scopes;
- `shell`: command lines as the policy reads them (fallback split, path arguments);
- `policy`: `decide`, which weighs deny rules, the mode, allow rules and grants;
- `sensitive`: the sensitive-path patterns both file sandboxes refuse.
"""

from soong_agent.domain.permissions.decision import (
    DecidedBy,
    Outcome,
    PermissionMode,
    Verdict,
    rank,
    strictest,
    strictest_mode,
)
from soong_agent.domain.permissions.grants import (
    SUGGEST_AFTER,
    SessionGrants,
    command_scope,
    describe_scope,
    describe_scopes,
    directory_scope,
    path_scope,
    scope_covers,
    session_scopes,
    suggested_rule,
    url_scope,
)
from soong_agent.domain.permissions.policy import decide, rules_for, without_approver
from soong_agent.domain.permissions.programs import Normalised, Risk, normalised, risks
from soong_agent.domain.permissions.request import PermissionRequest, TargetKind
from soong_agent.domain.permissions.rules import (
    MatchLevel,
    Rule,
    RuleKind,
    RuleSet,
    parse_rule,
    parse_rules,
    path_rule,
    prefix_covers,
)
from soong_agent.domain.permissions.sensitive import (
    SensitivePaths,
    SensitiveRule,
    compile_sensitive,
)
from soong_agent.domain.permissions.shell import fallback_analysis, show_command
from soong_agent.domain.permissions.targets import (
    DomainPattern,
    PathAnchor,
    anchored_path,
    glob_regex,
    url_host,
)

__all__ = [
    "SUGGEST_AFTER",
    "DecidedBy",
    "DomainPattern",
    "MatchLevel",
    "Normalised",
    "Outcome",
    "PathAnchor",
    "PermissionMode",
    "PermissionRequest",
    "Risk",
    "Rule",
    "RuleKind",
    "RuleSet",
    "SensitivePaths",
    "SensitiveRule",
    "SessionGrants",
    "TargetKind",
    "Verdict",
    "anchored_path",
    "command_scope",
    "compile_sensitive",
    "decide",
    "describe_scope",
    "describe_scopes",
    "directory_scope",
    "fallback_analysis",
    "glob_regex",
    "normalised",
    "parse_rule",
    "parse_rules",
    "path_rule",
    "path_scope",
    "prefix_covers",
    "rank",
    "risks",
    "rules_for",
    "scope_covers",
    "session_scopes",
    "show_command",
    "strictest",
    "strictest_mode",
    "suggested_rule",
    "url_host",
    "url_scope",
    "without_approver",
]
