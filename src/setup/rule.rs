//! The one trust rule: what each place a setting comes from may set. The person's
//! own places (their files, the command line, the environment) and the built-in
//! defaults set anything. A workspace's files (a repository: anyone may have
//! written them) set some things freely, some only to be stricter, some only
//! once the person trusts the workspace with them, and some never.
//!
//! | setting | a workspace's file may |
//! |---|---|
//! | default provider and model, model aliases, a provider's kind and output limits | set it |
//! | a role (its prompt, tools, model), memory text | set it |
//! | `[model_info]` context window and output limit, `[compaction] threshold` | only lower it |
//! | `[model_info]` prices | only raise them |
//! | a deny or ask permission rule, a role's permission mode | add it (it only narrows) |
//! | a provider's address other than its vendor's | set it once trusted with that address |
//! | an allow permission rule | set it once trusted (the workspace, or that rule) |
//! | an MCP server (`.mcp.json`, a repository role's `mcpServers`) | set it once trusted with that server |
//! | `[trust]`, `[sandbox]`, a provider's `api_key_env` | never |

/// Where a setting comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Origin {
    /// The built-in defaults and tables.
    BuiltIn,
    /// The person's own files (`~/.config/orchestrate/`, `~/.claude/`).
    User,
    /// The command line.
    CommandLine,
    /// The environment the person started the run in.
    Environment,
    /// A file of the workspace: the repository's, whoever wrote it.
    Workspace,
}

/// A kind of setting, as the rule tells them apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Setting {
    /// The default provider, the default model, model aliases.
    ModelChoice,
    /// A provider's kind, `max_tokens`, `thinking_budget`.
    ProviderShape,
    /// A provider's `base_url`, when it is not its vendor's own API.
    ProviderAddress,
    /// A provider's `api_key_env`: which secret goes where.
    KeyVariable,
    /// `[trust]`: what the person trusts a workspace with.
    Trust,
    /// `[sandbox]`: how Bash is confined.
    Sandbox,
    /// `[approval]`: who answers permission questions.
    Approval,
    /// `nats`: where sub-agents may run.
    Nats,
    /// `[model_info]` prices.
    Price,
    /// `[model_info]` context windows and output limits.
    ModelLimit,
    /// `[compaction] threshold`.
    CompactionThreshold,
    /// A deny or ask permission rule.
    NarrowingRule,
    /// An allow permission rule.
    AllowRule,
    /// An MCP server: a program to start, or an address to call.
    McpServer,
    /// A role file: its prompt, tools, model and limits.
    Role,
    /// A role's permission mode, which only narrows its caller's.
    RolePermissionMode,
    /// Memory files' text.
    Memory,
}

/// What a workspace's file may do with a setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// Set it.
    Free,
    /// Set it only to be stricter than it would be without the file.
    Stricter,
    /// Set it once the person trusts the workspace with it.
    Trusted,
    /// Never: only the person's own files may.
    UserOnly,
}

/// What becomes of one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// It is used.
    Use,
    /// It is used where it is stricter; otherwise ignored, with a warning.
    IfStricter,
    /// It needs the person's yes (on the terminal, or `--trust-workspace`).
    Ask,
    /// It is refused, with an error naming the file.
    Refuse,
}

/// What a workspace's file may do with `setting`.
pub fn rule(setting: Setting) -> Rule {
    match setting {
        Setting::ModelChoice | Setting::ProviderShape | Setting::Role | Setting::Memory => {
            Rule::Free
        }
        Setting::Price
        | Setting::ModelLimit
        | Setting::CompactionThreshold
        | Setting::NarrowingRule
        | Setting::RolePermissionMode => Rule::Stricter,
        Setting::ProviderAddress | Setting::AllowRule | Setting::McpServer => Rule::Trusted,
        Setting::KeyVariable
        | Setting::Trust
        | Setting::Sandbox
        | Setting::Approval
        | Setting::Nats => Rule::UserOnly,
    }
}

/// What becomes of a value of `setting` from `origin`; `trusted`: the person
/// trusts the workspace with this value (their file says so, or
/// `--trust-workspace`).
pub fn verdict(setting: Setting, origin: Origin, trusted: bool) -> Verdict {
    if origin != Origin::Workspace {
        return Verdict::Use;
    }
    match rule(setting) {
        Rule::Free => Verdict::Use,
        Rule::Stricter => Verdict::IfStricter,
        Rule::Trusted if trusted => Verdict::Use,
        Rule::Trusted => Verdict::Ask,
        Rule::UserOnly => Verdict::Refuse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: [Setting; 17] = [
        Setting::ModelChoice,
        Setting::ProviderShape,
        Setting::ProviderAddress,
        Setting::KeyVariable,
        Setting::Trust,
        Setting::Sandbox,
        Setting::Approval,
        Setting::Nats,
        Setting::Price,
        Setting::ModelLimit,
        Setting::CompactionThreshold,
        Setting::NarrowingRule,
        Setting::AllowRule,
        Setting::McpServer,
        Setting::Role,
        Setting::RolePermissionMode,
        Setting::Memory,
    ];

    #[test]
    fn the_persons_own_places_set_anything() {
        for origin in [
            Origin::BuiltIn,
            Origin::User,
            Origin::CommandLine,
            Origin::Environment,
        ] {
            for setting in SETTINGS {
                for trusted in [false, true] {
                    assert_eq!(
                        verdict(setting, origin, trusted),
                        Verdict::Use,
                        "{setting:?} from {origin:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_workspace_file_sets_what_the_table_says() {
        use Verdict::{Ask, IfStricter, Refuse, Use};
        // (setting, untrusted, trusted)
        let table = [
            (Setting::ModelChoice, Use, Use),
            (Setting::ProviderShape, Use, Use),
            (Setting::Role, Use, Use),
            (Setting::Memory, Use, Use),
            (Setting::ModelLimit, IfStricter, IfStricter),
            (Setting::CompactionThreshold, IfStricter, IfStricter),
            (Setting::Price, IfStricter, IfStricter),
            (Setting::NarrowingRule, IfStricter, IfStricter),
            (Setting::RolePermissionMode, IfStricter, IfStricter),
            (Setting::ProviderAddress, Ask, Use),
            (Setting::AllowRule, Ask, Use),
            (Setting::McpServer, Ask, Use),
            (Setting::Trust, Refuse, Refuse),
            (Setting::Sandbox, Refuse, Refuse),
            (Setting::Approval, Refuse, Refuse),
            (Setting::Nats, Refuse, Refuse),
            (Setting::KeyVariable, Refuse, Refuse),
        ];
        assert_eq!(table.len(), SETTINGS.len());
        for (setting, untrusted, trusted) in table {
            assert_eq!(
                verdict(setting, Origin::Workspace, false),
                untrusted,
                "{setting:?}"
            );
            assert_eq!(
                verdict(setting, Origin::Workspace, true),
                trusted,
                "{setting:?} trusted"
            );
        }
    }
}
