//! Claude Code's settings files, for their permission rules:
//! `~/.claude/settings.json`, then the workspace's `.claude/settings.json` and
//! `.claude/settings.local.json`, each `{"permissions": {"allow": [...], "deny":
//! [...], "ask": [...]}}`. As the trust rule says, deny and ask rules from any of
//! them are honoured (they only narrow); a workspace's allow rules only when the
//! person trusts the workspace, or that rule, since a repository could otherwise
//! approve its own commands. Saving an "always" answer adds an allow rule to
//! `.claude/settings.local.json`.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::rule::{Setting, Verdict, verdict};
use super::sources::Text;
use crate::error::ConfigError;
use crate::tools::rules::{Rule, Rules};

/// The rules of the settings files, and what a person should know about them.
#[derive(Debug, Default)]
pub(super) struct Settings {
    /// The rules.
    pub(super) rules: Rules,
    /// Rules that could not be read, workspace allow rules left out.
    pub(super) warnings: Vec<String>,
}

/// Where the workspace's personal settings are: where "always" answers go.
pub(super) fn local_file(workspace: &Path) -> PathBuf {
    workspace.join(".claude/settings.local.json")
}

/// The rules of the settings files `files` (as read, in order) for `workspace`;
/// `trusted`: the workspace's allow rules count; `pinned`: those of them that
/// count anyway (the person approved them). A file that is not JSON of the
/// expected shape is an error naming it.
pub(super) fn read(
    workspace: &Path,
    home: Option<&Path>,
    files: &[Text],
    trusted: bool,
    pinned: &[String],
) -> Result<Settings, ConfigError> {
    let mut settings = Settings {
        rules: Rules {
            workspace: workspace.to_owned(),
            home: home.map(Path::to_owned),
            ..Rules::default()
        },
        warnings: Vec::new(),
    };
    for file in files {
        let path = &file.path;
        let value: Value = serde_json::from_str(&file.text)
            .map_err(|e| invalid(path, &format!("not JSON: {e}")))?;
        let object = value
            .as_object()
            .ok_or_else(|| invalid(path, "not a JSON object"))?;
        settings.warnings.extend(unsupported(path, object)?);
        let permissions = &value["permissions"];
        let mut list = |key: &str| -> Result<Vec<Rule>, ConfigError> {
            let items = match &permissions[key] {
                Value::Null => return Ok(Vec::new()),
                Value::Array(items) => items,
                other => {
                    return Err(invalid(
                        path,
                        &format!("permissions.{key} must be a list, not {other}"),
                    ));
                }
            };
            let mut rules = Vec::new();
            for item in items {
                match item.as_str().and_then(Rule::parse) {
                    Some(rule) => rules.push(rule),
                    None => settings.warnings.push(format!(
                        "{}: permissions.{key}: {item} is not a rule; it is ignored",
                        path.display()
                    )),
                }
            }
            Ok(rules)
        };
        let (allow, deny, ask) = (list("allow")?, list("deny")?, list("ask")?);
        // A deny or an ask rule only narrows: it is always the stricter.
        let narrowing = verdict(Setting::NarrowingRule, file.origin, false);
        if matches!(narrowing, Verdict::Use | Verdict::IfStricter) {
            settings.rules.deny.extend(deny);
            settings.rules.ask.extend(ask);
        }
        let (honoured, ignored): (Vec<Rule>, Vec<Rule>) = allow.into_iter().partition(|r| {
            let trusted = trusted || pinned.contains(&r.to_string());
            verdict(Setting::AllowRule, file.origin, trusted) == Verdict::Use
        });
        settings.rules.allow.extend(honoured);
        if !ignored.is_empty() {
            let texts: Vec<String> = ignored.iter().map(ToString::to_string).collect();
            settings.warnings.push(format!(
                "{}: its allow rules {} are ignored: the workspace's files could approve their own commands (pass --trust-workspace to use them)",
                path.display(),
                texts.join(", ")
            ));
        }
    }
    Ok(settings)
}

/// What is read of a settings file: its permission rules, its hooks (see
/// `setup::hooks`), and `$schema`, which only names the file's schema.
const READ_KEYS: [&str; 3] = ["permissions", "hooks", "$schema"];

/// The kinds of permission rules.
const RULE_KINDS: [&str; 3] = ["allow", "deny", "ask"];

/// A warning for each key of a settings file that is not acted on (`hooks`,
/// `env`, `permissions.defaultMode`, …): someone relying on one should hear
/// that it does nothing here.
fn unsupported(
    path: &Path,
    settings: &serde_json::Map<String, Value>,
) -> Result<Vec<String>, ConfigError> {
    let warn = |key: &str| {
        let effect = "";
        // A key is the file's: shown quoted when it holds a line break or
        // another control character, so it cannot pass for a line of ours.
        let key = if key.chars().any(char::is_control) {
            format!("{key:?}")
        } else {
            key.to_owned()
        };
        format!(
            "{}: {key} is not supported yet and is ignored{effect}",
            path.display()
        )
    };
    let mut warnings: Vec<String> = (settings.keys())
        .filter(|key| !READ_KEYS.contains(&key.as_str()))
        .map(|key| warn(key))
        .collect();
    match settings.get("permissions") {
        None | Some(Value::Null) => {}
        Some(Value::Object(permissions)) => warnings.extend(
            (permissions.keys())
                .filter(|key| !RULE_KINDS.contains(&key.as_str()))
                .map(|key| warn(&format!("permissions.{key}"))),
        ),
        Some(other) => {
            return Err(invalid(
                path,
                &format!("permissions must be an object, not {other}"),
            ));
        }
    }
    Ok(warnings)
}

fn invalid(path: &Path, message: &str) -> ConfigError {
    ConfigError::Invalid(format!("{}: {message}", path.display()))
}

/// `text` (a settings file, or empty) with `rule` among its allow rules.
fn with_allow_rule(text: &str, rule: &str) -> Result<String, String> {
    let mut value: Value = if text.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?
    };
    let object = value.as_object_mut().ok_or("not a JSON object")?;
    let permissions = object
        .entry("permissions")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or("permissions is not an object")?;
    let allow = permissions
        .entry("allow")
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .ok_or("permissions.allow is not a list")?;
    if !allow.iter().any(|r| r == rule) {
        allow.push(Value::String(rule.to_owned()));
    }
    serde_json::to_string_pretty(&value).map_err(|e| e.to_string())
}

/// Adds `rule` to the allow rules of the settings file at `path` (made if need
/// be), replaced whole so that a crash mid-write never costs the file.
pub(super) fn save_allow_rule(path: &Path, rule: &str) -> Result<(), String> {
    // The folder is the repository's: a symlink in it must not lead the write
    // elsewhere.
    let linked = |p: &Path| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink());
    let dir = path.parent().ok_or("no directory")?;
    if linked(dir) || linked(path) {
        return Err(format!(
            "{} is a symbolic link; the rule is not saved",
            path.display()
        ));
    }
    let text = with_allow_rule(&super::remember::read_or_empty(path)?, rule)?;
    crate::tools::files::write_atomic(path, format!("{text}\n").as_bytes())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// The settings files of `ws` and `home` as the run reads them.
    fn files(ws: &Path, home: Option<&Path>) -> Vec<Text> {
        let home = home.map(|h| h.display().to_string());
        let env = move |k: &str| if k == "HOME" { home.clone() } else { None };
        let ws = ws.canonicalize().unwrap();
        super::super::Sources::read(&ws, None, &env)
            .unwrap()
            .settings
    }

    fn read(
        ws: &Path,
        home: Option<&Path>,
        trusted: bool,
        pinned: &[String],
    ) -> Result<Settings, ConfigError> {
        super::read(ws, home, &files(ws, home), trusted, pinned)
    }

    #[test]
    fn rules_come_from_every_file_and_untrusted_workspace_allows_are_left_out() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        write(
            &home.path().join(".claude/settings.json"),
            r#"{"permissions": {"allow": ["Bash(git log:*)"], "deny": ["Read(./.env)"]}}"#,
        );
        write(
            &ws.path().join(".claude/settings.json"),
            r#"{"permissions": {"allow": ["Bash"], "ask": ["Bash(git push:*)"], "deny": ["bad("]}}"#,
        );
        write(&local_file(ws.path()), r#"{"model": "x"}"#);
        let s = read(ws.path(), Some(home.path()), false, &[]).unwrap();
        let names = |rules: &[Rule]| rules.iter().map(ToString::to_string).collect::<Vec<_>>();
        assert_eq!(names(&s.rules.allow), ["Bash(git log:*)"]);
        assert_eq!(names(&s.rules.deny), ["Read(./.env)"]);
        assert_eq!(names(&s.rules.ask), ["Bash(git push:*)"]);
        assert_eq!(s.warnings.len(), 3, "{:?}", s.warnings);
        assert!(s.warnings[0].contains("\"bad(\" is not a rule"));
        assert!(s.warnings[1].contains("its allow rules Bash are ignored"));
        assert!(
            s.warnings[2]
                .ends_with("settings.local.json: model is not supported yet and is ignored")
        );
        let pinned = read(ws.path(), Some(home.path()), false, &["Bash".to_owned()]).unwrap();
        assert_eq!(names(&pinned.rules.allow), ["Bash(git log:*)", "Bash"]);
        let trusted = read(ws.path(), Some(home.path()), true, &[]).unwrap();
        assert_eq!(names(&trusted.rules.allow), ["Bash(git log:*)", "Bash"]);
    }

    #[test]
    fn a_broken_settings_file_is_an_error_naming_it() {
        let ws = tempfile::tempdir().unwrap();
        write(&ws.path().join(".claude/settings.json"), "{not json");
        let e = read(ws.path(), None, false, &[]).unwrap_err().to_string();
        assert!(e.contains(".claude/settings.json: not JSON"), "{e}");
        write(
            &ws.path().join(".claude/settings.json"),
            r#"{"permissions": {"deny": "Bash"}}"#,
        );
        let e = read(ws.path(), None, false, &[]).unwrap_err().to_string();
        assert!(e.contains("permissions.deny must be a list"), "{e}");
    }

    #[test]
    fn each_setting_not_acted_on_is_named_once_as_not_supported_yet() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        write(
            &home.path().join(".claude/settings.json"),
            r#"{"$schema": "https://json.schemastore.org/claude-code-settings.json",
                "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard"}]}]},
                "env": {"A": "1"},
                "permissions": {"deny": ["Bash(rm:*)"], "defaultMode": "acceptEdits", "additionalDirectories": ["../x"]}}"#,
        );
        let s = read(ws.path(), Some(home.path()), false, &[]).unwrap();
        let file = home.path().join(".claude/settings.json");
        let said: Vec<String> = (s.warnings.iter())
            .map(|w| {
                w.strip_prefix(&format!("{}: ", file.display()))
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            said,
            [
                "env is not supported yet and is ignored",
                "permissions.additionalDirectories is not supported yet and is ignored",
                "permissions.defaultMode is not supported yet and is ignored",
            ]
        );
        // What is supported still counts.
        assert_eq!(s.rules.deny.len(), 1);
        write(&local_file(ws.path()), "[]");
        let e = read(ws.path(), None, false, &[]).unwrap_err().to_string();
        assert!(e.ends_with("settings.local.json: not a JSON object"), "{e}");
    }

    #[test]
    fn an_always_answer_adds_one_allow_rule_and_keeps_the_rest() {
        let ws = tempfile::tempdir().unwrap();
        let path = local_file(ws.path());
        save_allow_rule(&path, "Bash(npm test)").unwrap();
        save_allow_rule(&path, "Bash(npm test)").unwrap();
        write(
            &path,
            &with_allow_rule(&std::fs::read_to_string(&path).unwrap(), "Edit").unwrap(),
        );
        let value: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(
            value["permissions"]["allow"],
            json!(["Bash(npm test)", "Edit"])
        );
        assert!(with_allow_rule("[1]", "Edit").is_err());
    }
}
