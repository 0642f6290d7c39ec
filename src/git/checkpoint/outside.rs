//! Checkpoints outside a git repository: before the run's file tools first
//! change a file, a copy of it (or a note that it did not exist) in the run's
//! state, `checkpoints/<run id>/<n>/` (`manifest.jsonl` and the copies under
//! `files/`); at the run's end, what each of those files then held (`end.jsonl`,
//! a hash), so that a rewind can tell changes made after the run. Bounded:
//! at most [`MAX_FILES`] files and [`MAX_BYTES`] in all. Changes made by
//! commands are not covered.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Files copied at most, per checkpoint.
pub const MAX_FILES: usize = 10_000;
/// Bytes copied at most, per checkpoint.
pub const MAX_BYTES: u64 = 256 << 20;

/// One file of a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    /// Its path, from the top of the workspace.
    pub path: PathBuf,
    /// Whether it existed (its copy is under `files/`).
    pub existed: bool,
    /// Its mode, when it existed.
    #[serde(default)]
    pub mode: u32,
}

/// A checkpoint's folder: `root/<n>`.
pub fn folder(root: &Path, n: u32) -> PathBuf {
    root.join(n.to_string())
}

/// The files checkpoint `dir` holds, in the order they were saved.
pub fn manifest(dir: &Path) -> Vec<Saved> {
    read_lines(&dir.join("manifest.jsonl"))
}

fn read_lines<T: serde::de::DeserializeOwned>(path: &Path) -> Vec<T> {
    let text = crate::small_file::read_to_string(path, 64 << 20).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// What a checkpoint holds so far: its files, and the bytes of its copies.
#[derive(Debug, Default)]
pub struct Held {
    paths: std::collections::HashSet<PathBuf>,
    bytes: u64,
}

impl Held {
    /// What checkpoint `dir` holds, read from it.
    pub fn read(dir: &Path) -> Self {
        let mut held = Self::default();
        for saved in manifest(dir) {
            if saved.existed {
                let copy = dir.join("files").join(&saved.path);
                held.bytes += std::fs::metadata(copy).map_or(0, |m| m.len());
            }
            held.paths.insert(saved.path);
        }
        held
    }

    /// Whether it holds `rel`.
    pub fn holds(&self, rel: &Path) -> bool {
        self.paths.contains(rel)
    }
}

/// Saves `path` (absolute, in `workspace`) into checkpoint `dir`, which
/// holds `held`, unless it holds it already or is full; whether it holds it
/// now.
pub fn save(dir: &Path, workspace: &Path, path: &Path, held: &mut Held) -> std::io::Result<bool> {
    let Ok(rel) = path.strip_prefix(workspace) else {
        return Ok(false);
    };
    if held.holds(rel) {
        return Ok(true);
    }
    let meta = std::fs::symlink_metadata(path).ok();
    let size = meta.as_ref().map_or(0, std::fs::Metadata::len);
    if held.paths.len() >= MAX_FILES || held.bytes + size > MAX_BYTES {
        return Ok(false);
    }
    let saved = match meta {
        Some(meta) if meta.is_file() => {
            let copy = dir.join("files").join(rel);
            if let Some(parent) = copy.parent() {
                std::fs::create_dir_all(parent)?;
            }
            std::fs::copy(path, &copy)?;
            Saved {
                path: rel.to_owned(),
                existed: true,
                mode: meta.permissions().mode() & 0o7777,
            }
        }
        // A link or a special file is not the file tools' to change.
        Some(_) => return Ok(false),
        None => Saved {
            path: rel.to_owned(),
            existed: false,
            mode: 0,
        },
    };
    std::fs::create_dir_all(dir)?;
    let mut manifest = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("manifest.jsonl"))?;
    writeln!(
        manifest,
        "{}",
        serde_json::to_string(&saved).unwrap_or_default()
    )?;
    held.bytes += if saved.existed { size } else { 0 };
    held.paths.insert(saved.path);
    Ok(true)
}

/// What the file at `path` holds, as a hash; `None` when there is none.
pub fn hash(path: &Path) -> Option<String> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    if !meta.is_file() {
        return Some("not a file".into());
    }
    let bytes = std::fs::read(path).ok()?;
    Some(crate::state::sha256_hex(&bytes))
}

/// One file's content at the run's end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ended {
    /// Its path, from the top of the workspace.
    pub path: PathBuf,
    /// What it held ([`hash`]).
    pub hash: Option<String>,
}

/// Notes what each file of checkpoint `dir` holds now, as the run's end.
pub fn end(dir: &Path, workspace: &Path) -> std::io::Result<()> {
    let mut text = String::new();
    for saved in manifest(dir) {
        let ended = Ended {
            hash: hash(&workspace.join(&saved.path)),
            path: saved.path,
        };
        text.push_str(&serde_json::to_string(&ended).unwrap_or_default());
        text.push('\n');
    }
    std::fs::write(dir.join("end.jsonl"), text)
}

/// The files of checkpoint `dir` changed since the run's end (all of them when
/// no end was noted).
pub fn changed_since_end(dir: &Path, workspace: &Path) -> Vec<PathBuf> {
    let ended: Vec<Ended> = read_lines(&dir.join("end.jsonl"));
    manifest(dir)
        .into_iter()
        .filter(|saved| {
            let now = hash(&workspace.join(&saved.path));
            ended
                .iter()
                .find(|e| e.path == saved.path)
                .is_none_or(|e| e.hash != now)
        })
        .map(|saved| saved.path)
        .collect()
}

/// Puts the files of checkpoint `dir` back into `workspace`: copies written
/// back with their modes, files that did not exist removed. The paths it
/// changed.
pub fn restore(dir: &Path, workspace: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut done = Vec::new();
    for saved in manifest(dir) {
        let target = workspace.join(&saved.path);
        let before = hash(&dir.join("files").join(&saved.path)).filter(|_| saved.existed);
        if hash(&target) == before {
            continue;
        }
        if saved.existed {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            // Never through a link the run left where the file was.
            if std::fs::symlink_metadata(&target).is_ok_and(|m| !m.is_file()) {
                std::fs::remove_file(&target)?;
            }
            std::fs::copy(dir.join("files").join(&saved.path), &target)?;
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(saved.mode))?;
        } else {
            match std::fs::remove_file(&target) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        done.push(saved.path);
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_saved_once_put_back_and_changes_since_the_end_told() {
        let workspace = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let (ws, dir) = (workspace.path(), state.path().join("1"));
        std::fs::write(ws.join("a.txt"), "a\n").unwrap();
        let mut held = Held::read(&dir);
        assert!(save(&dir, ws, &ws.join("a.txt"), &mut held).unwrap());
        assert!(save(&dir, ws, &ws.join("new.txt"), &mut held).unwrap());
        // The run changes both; a second save keeps the first copy.
        std::fs::write(ws.join("a.txt"), "a, by the run\n").unwrap();
        std::fs::write(ws.join("new.txt"), "new\n").unwrap();
        assert!(save(&dir, ws, &ws.join("a.txt"), &mut held).unwrap());
        assert_eq!(manifest(&dir).len(), 2);
        assert!(Held::read(&dir).holds(Path::new("new.txt")));
        end(&dir, ws).unwrap();
        assert!(changed_since_end(&dir, ws).is_empty());
        std::fs::write(ws.join("a.txt"), "the person's\n").unwrap();
        assert_eq!(changed_since_end(&dir, ws), [PathBuf::from("a.txt")]);
        let done = restore(&dir, ws).unwrap();
        assert_eq!(done.len(), 2);
        assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "a\n");
        assert!(!ws.join("new.txt").exists());
    }
}
