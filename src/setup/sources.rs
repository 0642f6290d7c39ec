//! Every file that configures a run, read once, each tagged with whose it is:
//! the person's (`~/.config/orchestrate/config.toml` and `mcp.json`,
//! `~/.claude/settings.json`, their roles and memory) and the workspace's
//! (`orchestrate.toml`, `.claude/settings.json`, `.claude/settings.local.json`,
//! `.mcp.json`, its roles and memory files).
//!
//! The person's files may be links they made ([`small_file::read_own`]); a
//! workspace's may link only within the workspace ([`small_file::read_within`]).
//! A file that is not one to read (a link out of the workspace, a FIFO, a device,
//! another user's) is skipped with a note naming it; one that cannot be read or
//! parsed as what it must be is an error naming it.

use std::path::{Path, PathBuf};

use super::rule::Origin;
use crate::config::ConfigFile;
use crate::error::ConfigError;
use crate::memory::Memory;
use crate::roles::catalog::{self, Catalog};
use crate::small_file::{self, ReadError};

/// A file as read: where it is, whose it is, and its text.
#[derive(Clone, Debug)]
pub struct Text {
    /// Where it is.
    pub path: PathBuf,
    /// Whose it is.
    pub origin: Origin,
    /// What it says.
    pub text: String,
}

/// A configuration file as parsed, and where it came from.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where it is (or would be).
    pub path: PathBuf,
    /// What it declares (empty when there is no file).
    pub file: ConfigFile,
}

/// Every source of a run's configuration, read once.
#[derive(Debug)]
pub struct Sources {
    /// The workspace, canonical.
    pub workspace: PathBuf,
    /// The person's home folder, when `HOME` is set.
    pub home: Option<PathBuf>,
    /// `~/.config/orchestrate/config.toml`, marked as the person's own.
    pub user: Config,
    /// The workspace's `orchestrate.toml`.
    pub repository: Config,
    /// The MCP servers' files that exist: the person's `mcp.json`, then the
    /// workspace's `.mcp.json`.
    pub mcp: Vec<Text>,
    /// Claude Code's settings files that exist, in order: the person's, the
    /// workspace's, the workspace's local one.
    pub settings: Vec<Text>,
    /// The folders roles were looked for in, in order.
    pub role_dirs: Vec<PathBuf>,
    /// The roles found.
    pub catalog: Catalog,
    /// The memory files' text.
    pub memory: Memory,
    /// Files skipped, one line each.
    pub notes: Vec<String>,
}

/// Where the person's configuration is: `~/.config/orchestrate/` (`None` without
/// `HOME`).
pub(crate) fn user_dir(home: Option<&Path>) -> Option<PathBuf> {
    home.map(|home| home.join(".config/orchestrate"))
}

impl Sources {
    /// Reads every source of `workspace` (canonical) and the home folder `env`
    /// names; `agents_dir`: a folder of roles the person named (`--agents-dir`).
    pub fn read(
        workspace: &Path,
        agents_dir: Option<&Path>,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let home = env("HOME").map(PathBuf::from);
        let mut notes = Vec::new();
        let mut read = |path: PathBuf, origin: Origin| -> Result<Option<Text>, ConfigError> {
            match read_text(workspace, &path, origin) {
                Ok(text) => Ok(Some(Text { path, origin, text })),
                Err(e) if e.is_not_found() => Ok(None),
                Err(e) if e.is_refused() => {
                    notes.push(format!("{e}; it is skipped"));
                    Ok(None)
                }
                Err(e) => Err(ConfigError::Invalid(e.to_string())),
            }
        };
        let user_dir = user_dir(home.as_deref());
        let user_path = user_dir.as_ref().map(|dir| dir.join("config.toml"));
        let user = match &user_path {
            Some(path) => read(path.clone(), Origin::User)?,
            None => None,
        };
        let repository_path = workspace.join("orchestrate.toml");
        let repository = read(repository_path.clone(), Origin::Workspace)?;
        let mut mcp = Vec::new();
        if let Some(dir) = &user_dir {
            mcp.extend(read(dir.join("mcp.json"), Origin::User)?);
        }
        mcp.extend(read(workspace.join(".mcp.json"), Origin::Workspace)?);
        let mut settings = Vec::new();
        if let Some(home) = &home {
            settings.extend(read(home.join(".claude/settings.json"), Origin::User)?);
        }
        // A workspace that is the home folder has one settings file, the
        // person's, not a second copy of the workspace's.
        let shared = workspace.join(".claude/settings.json");
        let same_file = |a: &Path, b: &Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b);
        let is_users = (home.as_ref())
            .is_some_and(|home| same_file(&home.join(".claude/settings.json"), &shared));
        if !is_users {
            settings.extend(read(shared, Origin::Workspace)?);
        }
        settings.extend(read(
            workspace.join(".claude/settings.local.json"),
            Origin::Workspace,
        )?);
        let (role_dirs, catalog) = roles(workspace, home.as_deref(), agents_dir);
        let memory = crate::memory::load(workspace, home.as_deref());
        Ok(Self {
            user: Config {
                file: parse(user.as_ref())?.trusted(),
                path: user_path.unwrap_or_default(),
            },
            repository: Config {
                file: parse(repository.as_ref())?,
                path: repository_path,
            },
            workspace: workspace.to_owned(),
            home,
            mcp,
            settings,
            role_dirs,
            catalog,
            memory,
            notes,
        })
    }

    /// Where the person's own file is, or would be (`None` without `HOME`).
    pub fn user_file(&self) -> Option<&Path> {
        self.home.as_ref().map(|_| self.user.path.as_path())
    }
}

/// A file's text, read as its origin allows.
fn read_text(workspace: &Path, path: &Path, origin: Origin) -> Result<String, ReadError> {
    match origin {
        Origin::Workspace => small_file::read_within(workspace, path, small_file::MAX_BYTES),
        _ => small_file::read_own(path, small_file::MAX_BYTES),
    }
}

/// A configuration file's declarations (none without the file).
fn parse(text: Option<&Text>) -> Result<ConfigFile, ConfigError> {
    match text {
        Some(text) => ConfigFile::parse(&text.path.display().to_string(), &text.text),
        None => Ok(ConfigFile::default()),
    }
}

/// The role folders of `workspace` (with `home`'s and `agents_dir`), and the
/// roles found in them.
pub fn roles(
    workspace: &Path,
    home: Option<&Path>,
    agents_dir: Option<&Path>,
) -> (Vec<PathBuf>, Catalog) {
    // Canonical, so that whose a role is (and so whether its MCP servers need
    // trust) is told by where it really is, not how the path was spelled.
    let dirs: Vec<PathBuf> = catalog::search_dirs(workspace, home, agents_dir)
        .into_iter()
        .map(|dir| dir.canonicalize().unwrap_or(dir))
        .collect();
    let catalog = Catalog::load_in(&dirs, Some(workspace));
    (dirs, catalog)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn every_source_is_read_once_and_tagged_with_whose_it_is() {
        let home = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        let dotfiles = home.path().join("dotfiles/config.toml");
        write(&dotfiles, "model = \"mine\"\n");
        std::fs::create_dir_all(home.path().join(".config/orchestrate")).unwrap();
        std::os::unix::fs::symlink(
            &dotfiles,
            home.path().join(".config/orchestrate/config.toml"),
        )
        .unwrap();
        write(&home.path().join(".claude/settings.json"), "{}");
        write(&ws_path.join("orchestrate.toml"), "provider = \"openai\"\n");
        write(&ws_path.join(".mcp.json"), "{}");
        write(&ws_path.join(".claude/settings.local.json"), "{}");
        // A repository's link out of the workspace is skipped, with a note.
        std::os::unix::fs::symlink(&dotfiles, ws_path.join(".claude/settings.json")).unwrap();
        let home_text = home.path().display().to_string();
        let env = move |k: &str| (k == "HOME").then(|| home_text.clone());
        let sources = Sources::read(&ws_path, None, &env).unwrap();
        assert_eq!(sources.user.file.model.as_deref(), Some("mine"));
        assert_eq!(sources.repository.file.provider.as_deref(), Some("openai"));
        let origins: Vec<(String, Origin)> = sources
            .settings
            .iter()
            .chain(&sources.mcp)
            .map(|t| {
                (
                    t.path.file_name().unwrap().to_string_lossy().into_owned(),
                    t.origin,
                )
            })
            .collect();
        assert_eq!(
            origins,
            [
                ("settings.json".to_owned(), Origin::User),
                ("settings.local.json".to_owned(), Origin::Workspace),
                (".mcp.json".to_owned(), Origin::Workspace),
            ]
        );
        assert_eq!(sources.notes.len(), 1, "{:?}", sources.notes);
        assert!(
            sources.notes[0].starts_with(&format!(
                "{}: leads outside {}",
                ws_path.join(".claude/settings.json").display(),
                ws_path.display()
            )),
            "{:?}",
            sources.notes
        );
    }
}
