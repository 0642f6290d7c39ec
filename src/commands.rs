//! Claude Code's slash commands: markdown files under `.claude/commands/`
//! (the workspace's) and `~/.claude/commands/` (the person's), a command per
//! file named by its path (`frontend/component.md` is `/frontend:component`,
//! and `/component` when no other file has that name). `orchestrate "/review
//! src/main.rs"` runs the command's body as the task, `$ARGUMENTS` (and `$1`,
//! `$2`, …) filled in. Frontmatter: `description`, `argument-hint`,
//! `allowed-tools` (the tools the run may use, only narrowing), `model`. The
//! person's command wins a name it shares with the workspace's.
//!
//! A body's `` !`command` `` (its output put in) and `@path` (the file put in)
//! run or read only for the person's own commands or in a trusted workspace;
//! elsewhere they stay as text, with a warning.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The most of a command file that is read.
const MAX_FILE: u64 = 256 * 1024;
/// The most of an `@file` or a `` !`command` `` output put in.
const MAX_INSERT: usize = 64 * 1024;
/// How long a `` !`command` `` may run.
const SHELL_TIMEOUT: Duration = Duration::from_secs(60);

/// A slash command.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Command {
    /// Its name (`review`, `frontend:component`).
    pub name: String,
    /// What it does.
    pub description: Option<String>,
    /// What its arguments are.
    pub argument_hint: Option<String>,
    /// The tools a run of it may use (`None`: its role's).
    pub allowed_tools: Option<Vec<String>>,
    /// The model it runs with.
    pub model: Option<String>,
    /// Its text.
    pub body: String,
    /// Its file.
    pub source: PathBuf,
    /// It is the person's own (`~/.claude/commands/`).
    pub own: bool,
}

/// A task that names a command: its name and its arguments (`/review a b`).
pub fn split(task: &str) -> Option<(&str, &str)> {
    let rest = task.trim_start().strip_prefix('/')?;
    let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let valid = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'));
    valid.then_some((name, args.trim()))
}

/// Command `name` of `home` or `workspace` (the person's wins), if one
/// exists; an error names a file that exists but cannot be read.
pub fn find(workspace: &Path, home: Option<&Path>, name: &str) -> Result<Option<Command>, String> {
    let own_root = home.map(|h| h.join(".claude/commands")).unwrap_or_default();
    // A workspace that is the home folder holds the person's own commands.
    let same = |a: &Path, b: &Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b);
    let workspace_root = workspace.join(".claude/commands");
    let workspace_is_home = same(&workspace_root, &own_root);
    let roots = [(own_root, true), (workspace_root, workspace_is_home)];
    for (root, own) in roots {
        if root.as_os_str().is_empty() || !root.is_dir() {
            continue;
        }
        let path = match by_path(&root, name) {
            Some(path) => Some(path),
            None => by_stem(&root, name),
        };
        if let Some(path) = path {
            let text = match own {
                true => crate::small_file::read_own(&path, MAX_FILE),
                false => crate::small_file::read_within(workspace, &path, MAX_FILE),
            }
            .map_err(|e| e.to_string())?;
            return parse(name, &path, &text, own).map(Some);
        }
    }
    Ok(None)
}

/// The commands of `home` and `workspace` by name (`frontend:component`
/// for `frontend/component.md`), the person's winning a shared name, with
/// their descriptions; at most [`MAX_LISTED`]. A file that cannot be read is
/// left out.
pub fn list(workspace: &Path, home: Option<&Path>) -> Vec<(String, String)> {
    let mut names = std::collections::BTreeSet::new();
    let roots = [
        home.map(|h| h.join(".claude/commands")),
        Some(workspace.join(".claude/commands")),
    ];
    for root in roots.into_iter().flatten().filter(|r| r.is_dir()) {
        for path in command_files(&root) {
            let name = path.strip_prefix(&root).unwrap_or(&path).with_extension("");
            names.insert(name.to_string_lossy().replace('/', ":"));
        }
    }
    (names.into_iter())
        .take(MAX_LISTED)
        .filter_map(|name| {
            let command = find(workspace, home, &name).ok().flatten()?;
            Some((name, command.description.unwrap_or_default()))
        })
        .collect()
}

/// Commands [`list`] gives, at most.
pub const MAX_LISTED: usize = 200;

/// `frontend:component` as `frontend/component.md` under `root`.
fn by_path(root: &Path, name: &str) -> Option<PathBuf> {
    let parts: Vec<&str> = name.split(':').collect();
    if parts
        .iter()
        .any(|p| p.is_empty() || *p == "." || *p == "..")
    {
        return None;
    }
    let path = root.join(parts.join("/")).with_extension("md");
    path.is_file().then_some(path)
}

/// The `.md` files under `root`, four folders deep at most.
fn command_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut folders = vec![(root.to_owned(), 0)];
    while let Some((folder, depth)) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = entry.path();
            if kind.is_dir() && depth < 4 {
                folders.push((path, depth + 1));
            } else if kind.is_file() && path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files
}

/// The one file named `<name>.md` in a folder of `root`.
fn by_stem(root: &Path, name: &str) -> Option<PathBuf> {
    if name.contains(':') {
        return None;
    }
    let file = format!("{name}.md");
    let mut found: Vec<PathBuf> = command_files(root)
        .into_iter()
        .filter(|p| p.file_name().is_some_and(|n| n == file.as_str()))
        .collect();
    (found.len() == 1).then(|| found.remove(0))
}

/// The entries of a command's or a skill's `allowed-tools` (`None`:
/// absent): a string is one entry, split into rules later outside
/// parentheses (`Bash(git log --format=%h,%s)` keeps its comma), a list of
/// strings one entry each; anything else is refused, since a list read
/// otherwise than meant would leave a session wider.
pub fn allowed_tools(field: Option<&serde_json::Value>) -> Result<Option<Vec<String>>, String> {
    match field {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(list)) => Ok(Some(vec![list.trim().to_owned()])),
        Some(serde_json::Value::Array(items)) if items.iter().all(|t| t.is_string()) => Ok(Some(
            items
                .iter()
                .filter_map(|t| t.as_str().map(|t| t.trim().to_owned()))
                .collect(),
        )),
        Some(other) => Err(format!(
            "allowed-tools must be a list of tools, not {other}"
        )),
    }
}

/// A command file's text: optional YAML frontmatter, then its body.
pub fn parse(name: &str, path: &Path, text: &str, own: bool) -> Result<Command, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let (front, body) = match text.strip_prefix("---\n") {
        Some(rest) => match rest
            .split_once("\n---\n")
            .or_else(|| rest.strip_suffix("\n---").map(|front| (front, "")))
        {
            Some((front, body)) => (front, body),
            None => {
                return Err(format!(
                    "{}: the frontmatter is never closed by a line `---`",
                    path.display()
                ));
            }
        },
        None => ("", text),
    };
    let fields: BTreeMap<String, serde_json::Value> = if front.trim().is_empty() {
        BTreeMap::new()
    } else {
        serde_saphyr::from_str(front)
            .map_err(|e| format!("{}: invalid frontmatter: {e}", path.display()))?
    };
    let text_of = |key: &str| {
        fields
            .get(key)
            .and_then(|v| v.as_str())
            .map(|s| s.trim().to_owned())
    };
    let allowed_tools = allowed_tools(fields.get("allowed-tools"))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Command {
        name: name.to_owned(),
        description: text_of("description"),
        argument_hint: text_of("argument-hint"),
        allowed_tools,
        model: text_of("model"),
        body: body.trim().to_owned(),
        source: path.to_owned(),
        own,
    })
}

/// `body` with `$ARGUMENTS` as `args` and `$1`, `$2`, … as its words (a
/// missing one is empty). A body that uses neither gets the arguments after
/// it, when there are some.
pub fn fill(body: &str, args: &str) -> String {
    let (out, used) = substitute(body, args, false);
    with_arguments(out, used, args)
}

/// `out` with the arguments after it when nothing `used` them.
fn with_arguments(mut out: String, used: bool, args: &str) -> String {
    if !used && !args.is_empty() {
        out.push_str(&format!("\n\nArguments: {args}"));
    }
    out
}

/// `text` with `$ARGUMENTS` and `$N` put in, each shell-quoted when `quote`
/// (inside a command); whether it had any.
fn substitute(text: &str, args: &str, quote: bool) -> (String, bool) {
    let words: Vec<&str> = args.split_whitespace().collect();
    let put = |value: &str| match quote {
        true => format!("'{}'", value.replace('\'', "'\\''")),
        false => value.to_owned(),
    };
    let mut out = String::with_capacity(text.len() + args.len());
    let mut used = false;
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        if let Some(tail) = after.strip_prefix("ARGUMENTS") {
            out.push_str(&put(args));
            used = true;
            rest = tail;
            continue;
        }
        let digits = after.chars().take_while(char::is_ascii_digit).count();
        match after[..digits].parse::<usize>() {
            Ok(n) if n >= 1 => {
                out.push_str(&put(words.get(n - 1).copied().unwrap_or("")));
                used = true;
                rest = &after[digits..];
            }
            _ => {
                out.push('$');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    (out, used)
}

/// `body` with `args` filled in and, when `allowed`, its `` !`command` ``
/// runs and `@path` files put in (found in the body as written, so that
/// arguments never add one; inside a command they are shell-quoted); else
/// its expansions stay as text, with a warning when it has some. Commands run
/// in `workspace` with `sh -c`; files are read within it.
pub async fn expand(
    body: &str,
    args: &str,
    workspace: &Path,
    allowed: bool,
) -> (String, Vec<String>) {
    let shells: Vec<(usize, usize)> = shell_spans(body);
    let files: Vec<(usize, usize)> = file_spans(body);
    if shells.is_empty() && files.is_empty() {
        return (fill(body, args), Vec::new());
    }
    if !allowed {
        return (
            fill(body, args),
            vec!["the command's !`…` and @file are left as text: it comes from an untrusted workspace (pass --trust-workspace to run and read them)".into()],
        );
    }
    let mut spans: Vec<(usize, usize, bool)> =
        shells.into_iter().map(|(a, b)| (a, b, true)).collect();
    spans.extend(files.into_iter().map(|(a, b)| (a, b, false)));
    spans.sort_unstable();
    let mut out = String::new();
    let mut used = false;
    let mut at = 0;
    for (start, end, shell) in spans {
        if start < at {
            continue;
        }
        let (before, any) = substitute(&body[at..start], args, false);
        out.push_str(&before);
        used |= any;
        let (inserted, any) = match shell {
            true => {
                let (command, any) = substitute(&body[start + 2..end - 1], args, true);
                (run_shell(&command, workspace).await, any)
            }
            false => {
                let (path, any) = substitute(&body[start + 1..end], args, false);
                (read_file(&path, workspace), any)
            }
        };
        out.push_str(&inserted);
        used |= any;
        at = end;
    }
    let (after, any) = substitute(&body[at..], args, false);
    out.push_str(&after);
    (with_arguments(out, used || any, args), Vec::new())
}

/// Where `` !`…` `` runs are in `body`: from the `!` to past the closing
/// backtick.
fn shell_spans(body: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut from = 0;
    while let Some(found) = body[from..].find("!`") {
        let start = from + found;
        let Some(len) = body[start + 2..].find('`') else {
            break;
        };
        let end = start + 2 + len + 1;
        if len > 0 {
            spans.push((start, end));
        }
        from = end;
    }
    spans
}

/// Where `@path` references are in `body`: an `@` at a word's start followed
/// by a path.
fn file_spans(body: &str) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    for (i, c) in body.char_indices() {
        if c != '@' || body[..i].chars().last().is_some_and(|p| !p.is_whitespace()) {
            continue;
        }
        let len = body[i + 1..]
            .find(|c: char| c.is_whitespace() || matches!(c, ',' | ';' | ')' | '`' | '"' | '\''))
            .unwrap_or(body.len() - i - 1);
        let path = body[i + 1..i + 1 + len].trim_end_matches('.');
        if !path.is_empty() && (path.contains('/') || path.contains('.')) {
            spans.push((i, i + 1 + path.len()));
        }
    }
    spans
}

/// What `command` prints (both streams), run in `workspace` as a hook runs:
/// the person's own command, in a process group of its own that goes when it
/// is done, its output bounded, no provider key in its environment.
async fn run_shell(command: &str, workspace: &Path) -> String {
    let ran =
        crate::hooks::run::shell(command, Vec::new(), workspace, workspace, SHELL_TIMEOUT).await;
    match ran.failure {
        Some(why) if ran.exit_code.is_none() => {
            format!("[`{command}` did not run to its end: {why}]")
        }
        _ => {
            let mut text = ran.stdout;
            text.push_str(&ran.stderr);
            clip(text.trim_end())
        }
    }
}

/// File `path` of `workspace`, as text.
fn read_file(path: &str, workspace: &Path) -> String {
    let full = workspace.join(path);
    match crate::small_file::read_within(workspace, &full, MAX_INSERT as u64) {
        Ok(text) => format!("{path}:\n```\n{}\n```", clip(&text)),
        Err(e) => format!("@{path} [not read: {e}]"),
    }
}

fn clip(text: &str) -> String {
    if text.len() <= MAX_INSERT {
        return text.to_owned();
    }
    let mut end = MAX_INSERT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}\n[cut at {end} bytes]", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_names_a_command_by_its_first_word() {
        assert_eq!(
            split("/review src/main.rs now"),
            Some(("review", "src/main.rs now"))
        );
        assert_eq!(
            split("/frontend:component"),
            Some(("frontend:component", ""))
        );
        assert_eq!(split("/usr/bin is odd"), None);
        assert_eq!(split("review it"), None);
        assert_eq!(split("/"), None);
    }

    #[test]
    fn arguments_fill_the_body_whole_and_word_by_word() {
        assert_eq!(
            fill("Review $ARGUMENTS.", "src/a.rs b"),
            "Review src/a.rs b."
        );
        assert_eq!(
            fill("Fix issue #$1 by $2, not $3$", "42 ann"),
            "Fix issue #42 by ann, not $"
        );
        assert_eq!(fill("Just do it.", "now"), "Just do it.\n\nArguments: now");
        assert_eq!(fill("Costs $5 and $ARGUMENTS", ""), "Costs  and ");
    }

    #[test]
    fn a_command_file_has_optional_frontmatter() {
        let text = "---\ndescription: Reviews a file\nargument-hint: <file>\nallowed-tools: Read, Grep\nmodel: haiku\n---\nReview $ARGUMENTS.\n";
        let c = parse("review", Path::new("r.md"), text, false).unwrap();
        assert_eq!(c.description.as_deref(), Some("Reviews a file"));
        assert_eq!(c.allowed_tools, Some(vec!["Read, Grep".to_owned()]));
        // Split into rules outside parentheses: a pattern keeps its comma.
        let text = "---\nallowed-tools: Read, Bash(git log --format=%h,%s)\n---\nLog.\n";
        let log = parse("log", Path::new("l.md"), text, false).unwrap();
        let (rules, bad) = crate::tools::rules::parse_list(&log.allowed_tools.unwrap());
        assert!(bad.is_empty(), "{bad:?}");
        let rules: Vec<String> = rules.iter().map(ToString::to_string).collect();
        assert_eq!(rules, ["Read", "Bash(git log --format=%h,%s)"]);
        assert_eq!(c.model.as_deref(), Some("haiku"));
        assert_eq!(c.body, "Review $ARGUMENTS.");
        let plain = parse("x", Path::new("x.md"), "Do $1.", true).unwrap();
        assert_eq!((plain.body.as_str(), plain.own), ("Do $1.", true));
        assert!(parse("x", Path::new("x.md"), "---\nmodel: a\n", false).is_err());
    }

    #[tokio::test]
    async fn shell_runs_and_files_are_put_in_only_when_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        std::fs::write(ws.join("notes.txt"), "the notes").unwrap();
        let body = "Status: !`echo clean $1` and see @notes.txt.";
        let (text, warnings) = expand(body, "it", &ws, true).await;
        assert_eq!(
            text,
            "Status: clean it and see notes.txt:\n```\nthe notes\n```."
        );
        assert!(warnings.is_empty());
        let (text, warnings) = expand(body, "it", &ws, false).await;
        let left = "Status: !`echo clean it` and see @notes.txt.";
        assert_eq!((text.as_str(), warnings.len()), (left, 1));
        // A file outside the workspace is not read.
        let outside = ws.join("../outside-notes.txt");
        std::fs::write(&outside, "private").unwrap();
        let (text, _) = expand("see @../outside-notes.txt", "", &ws, true).await;
        std::fs::remove_file(&outside).unwrap();
        assert!(
            text.starts_with("see @../outside-notes.txt [not read"),
            "{text}"
        );
        // Arguments never add an expansion, and are quoted inside a command.
        let hostile = "`touch x`; !`touch y` @/etc/passwd";
        let (text, _) = expand("Echo: !`echo $ARGUMENTS`", hostile, &ws, true).await;
        assert_eq!(text, format!("Echo: {hostile}"));
        assert!(!ws.join("x").exists() && !ws.join("y").exists());
    }

    #[test]
    fn a_command_is_found_by_path_or_by_its_name_alone_and_the_person_s_wins() {
        let ws = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws_path.join(".claude/commands/frontend")).unwrap();
        std::fs::write(
            ws_path.join(".claude/commands/frontend/component.md"),
            "Make $1.",
        )
        .unwrap();
        std::fs::create_dir_all(home.path().join(".claude/commands")).unwrap();
        std::fs::write(home.path().join(".claude/commands/review.md"), "Mine.").unwrap();
        let find = |name: &str| find(&ws_path, Some(home.path()), name).unwrap();
        assert_eq!(find("frontend:component").unwrap().body, "Make $1.");
        assert_eq!(find("component").unwrap().body, "Make $1.");
        let review = find("review").unwrap();
        assert!(review.own);
        assert!(find("absent").is_none());
        std::fs::write(ws_path.join(".claude/commands/review.md"), "Ours.").unwrap();
        assert_eq!(find("review").unwrap().body, "Mine.");
        std::fs::write(ws_path.join(".claude/commands/ours.md"), "Ours.").unwrap();
        assert!(!find("ours").unwrap().own);
    }
}
