//! Remembering what the person trusts a workspace with, in their own
//! `~/.config/orchestrate/config.toml`: the file's text is edited
//! (`config::remember` and its kin keep everything else, comments too) and
//! written whole with a rename, through the links the person made to it.

use std::path::Path;

use crate::config;

/// Writes a trust into the user's file at `path` (`None`: `$HOME` is not set) with
/// `change`; the warnings to show when it could not be remembered.
pub(crate) fn remembered(
    path: Option<&Path>,
    change: impl FnOnce(&str) -> Result<String, String>,
) -> Vec<String> {
    let Some(path) = path else {
        return vec!["HOME is not set: the trust in this workspace is not remembered".to_owned()];
    };
    match rewrite(path, change) {
        Ok(()) => Vec::new(),
        Err(e) => vec![format!(
            "cannot remember the trust in {}: {e}; the next run will ask again",
            path.display()
        )],
    }
}

/// Pins an allow rule the person approved for `workspace` in the user's file.
pub(crate) fn pin_rule(path: &Path, workspace: &str, rule: &str) -> Result<(), String> {
    rewrite(path, |text| config::pin_rules(text, workspace, &[rule]))
}

/// Rewrites the user's file at `path` (created if need be) with `change`,
/// replacing it whole.
pub(crate) fn rewrite(
    path: &Path,
    change: impl FnOnce(&str) -> Result<String, String>,
) -> Result<(), String> {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let text = read_or_empty(&path)?;
    let text = change(&text)?;
    crate::tools::files::write_atomic(&path, text.as_bytes()).map_err(|e| e.to_string())
}

/// A file the user keeps, read bounded; empty when it does not exist yet.
pub(crate) fn read_or_empty(path: &Path) -> Result<String, String> {
    match crate::small_file::read_to_string(path, crate::small_file::MAX_BYTES) {
        Ok(text) => Ok(text),
        Err(e) if e.is_not_found() => Ok(String::new()),
        Err(e) => Err(e.problem.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trust_is_remembered_in_the_users_file_through_its_symlink() {
        let home = tempfile::tempdir().unwrap();
        let dotfiles = home.path().join("dotfiles/config.toml");
        std::fs::create_dir_all(dotfiles.parent().unwrap()).unwrap();
        std::fs::write(&dotfiles, "# mine\nmodel = \"m\"\n").unwrap();
        let dir = home.path().join(".config/orchestrate");
        std::fs::create_dir_all(&dir).unwrap();
        std::os::unix::fs::symlink(&dotfiles, dir.join("config.toml")).unwrap();
        rewrite(&dir.join("config.toml"), |t| {
            config::remember(t, "/w", &["http://x/v1"])
        })
        .unwrap();
        assert!(
            std::fs::symlink_metadata(dir.join("config.toml"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        let text = std::fs::read_to_string(&dotfiles).unwrap();
        assert!(text.starts_with("# mine\nmodel = \"m\"\n"), "{text}");
        let user = config::ConfigFile::parse("config.toml", &text).unwrap();
        assert!(user.trusts("/w", "http://x/v1"));
        // No file yet, nor its directory: both are made.
        let fresh = home.path().join("fresh/.config/orchestrate/config.toml");
        rewrite(&fresh, |t| config::remember(t, "/w", &["http://x/v1"])).unwrap();
        let text = std::fs::read_to_string(&fresh).unwrap();
        assert!(
            config::ConfigFile::parse("config.toml", &text)
                .unwrap()
                .trusts("/w", "http://x/v1")
        );
    }
}
