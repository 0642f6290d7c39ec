//! The lead's signing key: an nkey seed in the person's state root
//! (`lead.nk`, theirs alone), made the first time a run places a sub-agent
//! remotely or a worker starts. A worker of the same user on the same
//! machine trusts it without being told.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use nkeys::KeyPair;

/// The key file's name in the state root.
const FILE: &str = "lead.nk";

/// The lead key kept in `root` (the state root), made there if there is none.
/// A key file that is a link, another user's, or readable by others is
/// refused.
pub fn lead_key(root: &Path) -> Result<KeyPair, String> {
    let path = root.join(FILE);
    match read(&path) {
        Ok(Some(key)) => return Ok(key),
        Ok(None) => {}
        Err(e) => return Err(e),
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .map_err(|e| format!("{}: {e}", root.display()))?;
    let key = KeyPair::new_user();
    let seed = key.seed().map_err(|e| e.to_string())?;
    // Written whole under a name of its own, then linked into place: a
    // process that reads it never sees half a key, and of two that make one
    // at once, the first to link wins and the other reads it.
    let made = root.join(format!(".{FILE}.{}", uuid::Uuid::new_v4().simple()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&made)?;
        file.write_all(seed.as_bytes())?;
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&made);
        return Err(format!("{}: {e}", made.display()));
    }
    let linked = std::fs::hard_link(&made, &path);
    let _ = std::fs::remove_file(&made);
    match linked {
        Ok(()) => Ok(key),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read(&path)?.ok_or_else(|| format!("{}: vanished as it was made", path.display()))
        }
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The key in `path`; `None` when there is no file.
fn read(path: &Path) -> Result<Option<KeyPair>, String> {
    let shown = path.display();
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    if !meta.file_type().is_file() {
        return Err(format!("{shown}: not a regular file"));
    }
    if meta.uid() != rustix::process::geteuid().as_raw() {
        return Err(format!("{shown}: another user's"));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(format!("{shown}: readable by others (chmod 600 it)"));
    }
    let seed = std::fs::read_to_string(path).map_err(|e| format!("{shown}: {e}"))?;
    KeyPair::from_seed(seed.trim())
        .map(Some)
        .map_err(|e| format!("{shown}: not a key ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lead_key_is_made_once_kept_private_and_trusted_locally() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("state");
        let public = |root: &Path| {
            read(&root.join(FILE))
                .ok()
                .flatten()
                .map(|k| k.public_key())
        };
        assert_eq!(public(&root), None);
        let made = lead_key(&root).unwrap();
        let again = lead_key(&root).unwrap();
        assert_eq!(made.public_key(), again.public_key());
        assert_eq!(public(&root), Some(made.public_key()));
        let mode = std::fs::metadata(root.join(FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);

        std::fs::set_permissions(root.join(FILE), std::fs::Permissions::from_mode(0o644)).unwrap();
        let why = lead_key(&root).unwrap_err();
        assert!(why.ends_with("readable by others (chmod 600 it)"), "{why}");
        assert_eq!(public(&root), None);
    }

    #[test]
    fn two_processes_making_the_key_at_once_get_the_same_one() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_owned();
        let keys: Vec<String> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| lead_key(&root).map(|k| k.public_key())))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap().unwrap())
                .collect()
        });
        assert!(keys.windows(2).all(|w| w[0] == w[1]), "{keys:?}");
    }
}
