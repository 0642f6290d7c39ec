//! The workspace sandbox: every path a tool touches is resolved against the
//! workspace root, following `..` and symlinks the way the kernel would, and a path
//! that ends up outside the root is refused.

use std::path::{Component, Path, PathBuf};

use crate::error::ToolError;

/// Symlinks followed at most while resolving one path (as the kernel's ELOOP).
const MAX_LINKS: usize = 40;

/// Resolves `input` (absolute, or relative to `root`) to an absolute path inside
/// `root`, which must itself be canonical. Existing symlinks are followed wherever
/// they appear; the part of the path that does not exist yet is taken as written.
pub fn resolve(root: &Path, input: &str) -> Result<PathBuf, ToolError> {
    if input.trim().is_empty() {
        return Err(ToolError::InvalidInput("the path is empty".into()));
    }
    let given = Path::new(input);
    let start = if given.is_absolute() {
        given.to_path_buf()
    } else {
        root.join(given)
    };
    let mut pending: Vec<PathBuf> = vec![start];
    let mut out = PathBuf::new();
    let mut links = 0;
    // A stack of paths still to walk: a symlink's target is pushed in front of the
    // rest of the path, so `..` after a link climbs from where the link points.
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    while let Some(path) = pending.pop() {
        let mut comps: Vec<Component<'_>> = path.components().collect();
        comps.reverse();
        while let Some(comp) = comps.pop() {
            match comp {
                Component::Prefix(_) | Component::RootDir => {
                    out = PathBuf::from(comp.as_os_str());
                }
                Component::CurDir => {}
                Component::ParentDir => {
                    out.pop();
                }
                Component::Normal(name) => {
                    out.push(name);
                    let Ok(meta) = std::fs::symlink_metadata(&out) else {
                        continue;
                    };
                    if !meta.file_type().is_symlink() {
                        continue;
                    }
                    links += 1;
                    if links > MAX_LINKS {
                        return Err(ToolError::Failed(format!(
                            "{input}: too many levels of symbolic links"
                        )));
                    }
                    let target = std::fs::read_link(&out)
                        .map_err(|e| ToolError::Failed(format!("{input}: {e}")))?;
                    out.pop();
                    rest.clear();
                    rest.extend(comps.drain(..).rev().map(|c| c.as_os_str().to_owned()));
                    let mut next = if target.is_absolute() {
                        target
                    } else {
                        out.join(target)
                    };
                    for part in &rest {
                        next.push(part);
                    }
                    pending.push(next);
                    break;
                }
            }
        }
    }
    if !out.starts_with(root) {
        return Err(ToolError::Failed(format!(
            "{input}: outside the workspace ({})",
            root.display()
        )));
    }
    Ok(out)
}

/// Refuses `path` (resolved from `input`) when it is one of `private` or inside
/// one: the run's own state is nobody's to read or change, even when the
/// workspace contains it.
pub fn refuse_private(path: &Path, private: &[PathBuf], input: &str) -> Result<(), ToolError> {
    if private.iter().any(|place| path.starts_with(place)) {
        return Err(ToolError::Failed(format!(
            "{input}: orchestrate's own state; no tool may read or change it"
        )));
    }
    Ok(())
}

/// The path as the model should see it: relative to the root when inside it.
pub fn display(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir_all(root.join("src")).unwrap();
        (dir, root)
    }

    #[test]
    fn relative_and_absolute_paths_inside_resolve() {
        let (_d, root) = root();
        assert_eq!(
            resolve(&root, "src/main.rs").unwrap(),
            root.join("src/main.rs")
        );
        assert_eq!(
            resolve(&root, "./src/../src/lib.rs").unwrap(),
            root.join("src/lib.rs")
        );
        let abs = root.join("new/dir/file.txt");
        assert_eq!(resolve(&root, abs.to_str().unwrap()).unwrap(), abs);
    }

    #[test]
    fn climbing_out_is_refused() {
        let (_d, root) = root();
        let err = resolve(&root, "../../etc/passwd").unwrap_err().to_string();
        assert!(err.contains("outside the workspace"), "{err}");
        assert!(
            resolve(&root, "/etc/passwd")
                .unwrap_err()
                .to_string()
                .contains("outside the workspace")
        );
        assert!(resolve(&root, "src/../../x").is_err());
    }

    #[test]
    fn symlinks_are_followed_both_ways() {
        let (d, root) = root();
        let outside = d.path().canonicalize().unwrap().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        assert!(
            resolve(&root, "escape/secret.txt")
                .unwrap_err()
                .to_string()
                .contains("outside the workspace")
        );
        std::os::unix::fs::symlink(root.join("src"), root.join("alias")).unwrap();
        assert_eq!(resolve(&root, "alias/x.rs").unwrap(), root.join("src/x.rs"));
        // `..` after a link climbs from where the link points.
        std::os::unix::fs::symlink(root.join("src"), root.join("deep")).unwrap();
        assert_eq!(
            resolve(&root, "deep/../README.md").unwrap(),
            root.join("README.md")
        );
        // A dangling link pointing outside is refused too.
        std::os::unix::fs::symlink("/nonexistent/place", root.join("dangling")).unwrap();
        assert!(resolve(&root, "dangling").is_err());
    }

    #[test]
    fn link_loops_end() {
        let (_d, root) = root();
        std::os::unix::fs::symlink(root.join("b"), root.join("a")).unwrap();
        std::os::unix::fs::symlink(root.join("a"), root.join("b")).unwrap();
        assert!(
            resolve(&root, "a/x")
                .unwrap_err()
                .to_string()
                .contains("too many levels")
        );
    }
}
