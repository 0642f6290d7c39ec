//! What a git config file says about where git will look for more of what it
//! runs: `core.hooksPath` (hooks kept outside `.git/hooks`), `include.path` and
//! `includeIf.*.path` (more config, which may name programs), and whether
//! `extensions.worktreeConfig` makes git read a worktree's `config.worktree`.
//! Read as git reads the file: sections and keys case-insensitive, values
//! unquoted, comments after `#` or `;` outside quotes.

/// The places a config file sends git to.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Pointers {
    /// `core.hooksPath` values, as written.
    pub hooks_paths: Vec<String>,
    /// `include.path` and `includeIf.<condition>.path` values, as written.
    pub includes: Vec<String>,
    /// `extensions.worktreeConfig` is set true.
    pub worktree_config: bool,
}

/// Reads `text`, a git config file.
pub fn pointers(text: &str) -> Pointers {
    let mut found = Pointers::default();
    let mut section = String::new();
    for raw in text.lines() {
        let line = raw.trim();
        if let Some(header) = line.strip_prefix('[') {
            let Some(end) = header.find(']') else {
                continue;
            };
            // `[name "sub"]` or the old `[name.sub]`: the name is what counts.
            let name = header[..end].trim();
            let name = name.split(['"', ' ', '.']).next().unwrap_or_default();
            section = name.to_ascii_lowercase();
            // A key may follow the header on the same line.
            let rest = header[end + 1..].trim();
            if !rest.is_empty() {
                entry(&section, rest, &mut found);
            }
            continue;
        }
        entry(&section, line, &mut found);
    }
    found
}

/// One `key = value` line of `section`.
fn entry(section: &str, line: &str, found: &mut Pointers) {
    if line.is_empty() || line.starts_with(['#', ';']) {
        return;
    }
    let (key, value) = match line.split_once('=') {
        Some((key, value)) => (key.trim().to_ascii_lowercase(), unquote(value)),
        // A bare key is true.
        None => (line.trim().to_ascii_lowercase(), "true".to_owned()),
    };
    match (section, key.as_str()) {
        ("core", "hookspath") => found.hooks_paths.push(value),
        ("include" | "includeif", "path") => found.includes.push(value),
        ("extensions", "worktreeconfig") => {
            found.worktree_config = matches!(
                value.to_ascii_lowercase().as_str(),
                "true" | "yes" | "on" | "1"
            );
        }
        _ => {}
    }
}

/// A value as git reads it: quotes taken out, escapes read, a comment outside
/// quotes cut off, the ends trimmed.
fn unquote(value: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = value.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => {}
            },
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_paths_includes_and_the_worktree_extension_are_read_as_git_reads_them() {
        let text = r#"
[core]
	bare = false
	HooksPath = "./.githooks" ; a comment
[include]
	path = ../.gitconfig
[includeIf "gitdir:~/work/"]
	path = "work config"
[Extensions]
	worktreeConfig
[core] hookspath = tools/hooks
[alias]
	path = not/an/include
"#;
        let found = pointers(text);
        assert_eq!(found.hooks_paths, ["./.githooks", "tools/hooks"]);
        assert_eq!(found.includes, ["../.gitconfig", "work config"]);
        assert!(found.worktree_config);
        assert!(!pointers("[extensions]\nworktreeConfig = false\n").worktree_config);
    }
}
