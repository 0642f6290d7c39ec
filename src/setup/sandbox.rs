//! The Bash tool's confinement, from `--sandbox` and the `[sandbox]` table of the
//! user's own configuration (a repository's `orchestrate.toml` may not set it:
//! the trust rule refuses it before this), with the notes to show at start about
//! what this kernel does not allow.

use std::path::{Path, PathBuf};

use crate::config::ConfigFile;
use crate::error::ConfigError;
use crate::tools::bash::{Bash, Confinement, SandboxMode};

/// The Bash tool the run offers, and what to tell the person about its confinement:
/// `flag` is `--sandbox`, `user` the person's own file; `keys`: the variables that
/// hold provider keys, kept out of its commands.
pub(super) fn bash(
    flag: Option<SandboxMode>,
    user: &ConfigFile,
    keys: Vec<String>,
    env: &impl Fn(&str) -> Option<String>,
) -> Result<(Bash, Vec<String>), ConfigError> {
    let entry = user.sandbox.clone().unwrap_or_default();
    let mode = match (flag, &entry.mode) {
        (Some(mode), _) => mode,
        (None, Some(name)) => name
            .parse::<SandboxMode>()
            .map_err(|e| ConfigError::Invalid(format!("[sandbox] mode: {e}")))?,
        (None, None) => SandboxMode::default(),
    };
    let home = env("HOME").map(PathBuf::from);
    let writable = entry
        .writable
        .iter()
        .map(|path| writable_path(path, home.as_deref()))
        .collect::<Result<Vec<_>, _>>()?;
    let (confinement, notes) = Confinement::for_this_process(mode, writable, keys);
    Ok((Bash::confined(confinement), notes))
}

/// An absolute path, or `~/…` under the home directory.
fn writable_path(path: &str, home: Option<&Path>) -> Result<PathBuf, ConfigError> {
    let bad = |reason: &str| ConfigError::Invalid(format!("[sandbox] writable: {path:?} {reason}"));
    if let Some(rest) = path.strip_prefix("~/") {
        return home
            .map(|home| home.join(rest))
            .ok_or_else(|| bad("names the home directory, but HOME is not set"));
    }
    let path_buf = PathBuf::from(path);
    if !path_buf.is_absolute() {
        return Err(bad("must be absolute (or start with ~/)"));
    }
    Ok(path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writable_paths_are_absolute_or_under_home() {
        let home = Some(Path::new("/home/u"));
        assert_eq!(
            writable_path("~/.cache", home).unwrap(),
            PathBuf::from("/home/u/.cache")
        );
        assert_eq!(
            writable_path("/var/tmp", None).unwrap(),
            PathBuf::from("/var/tmp")
        );
        assert_eq!(
            writable_path("build", home).unwrap_err().to_string(),
            ConfigError::Invalid(
                "[sandbox] writable: \"build\" must be absolute (or start with ~/)".into()
            )
            .to_string()
        );
    }
}
