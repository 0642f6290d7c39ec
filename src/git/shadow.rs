//! A folder's shadow index: the folder as git sees it (tracked files as they
//! are on disk, untracked ones that are not ignored), kept in an index file of
//! orchestrate's own, so that comparing the folder before and after a command
//! never touches the person's index nor takes its `index.lock`. In a repository
//! the shadow starts as a copy of the person's index (its record of sizes and
//! times spares reading the files that did not change) and keeps its objects in
//! the repository's store, unreferenced, for git's garbage collection to prune;
//! outside one it is a private repository in the scratch folder, made only for
//! a folder a bounded walk finds small enough to hash whole.
//!
//! Blocking: every method runs git.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::checkout::{self, CheckoutError, PathChange, git};

/// The most files a folder outside a repository may hold to be shadowed.
pub const MAX_FILES: usize = 20_000;
/// The most bytes its files may hold together.
pub const MAX_BYTES: u64 = 128 * 1024 * 1024;

/// git's empty tree.
pub const EMPTY_TREE: &str = "4b825dc642cb6eb9a060e54bf8d69288fbee4904";

/// What makes a look at a few paths quick in a large index: no checksum of
/// the index (it is orchestrate's own, read by nobody else), no threads to
/// look at every entry when a few are asked for, and one flush to disk for
/// all the objects a command writes rather than one each. Its index is whole
/// in one file (a split index would write its shared part into the
/// repository's folder), and an ignored path named to `add` is no advice.
const QUICK: [(&str, &str); 5] = [
    ("index.skipHash", "true"),
    ("core.preloadIndex", "false"),
    ("core.fsyncMethod", "batch"),
    ("core.splitIndex", "false"),
    ("advice.addIgnoredFile", "false"),
];

/// One folder's shadow index.
#[derive(Debug)]
pub struct Shadow {
    /// The folder (canonical).
    folder: PathBuf,
    /// The index file.
    index: PathBuf,
    /// The private repository, outside a repository.
    own: Option<PathBuf>,
    /// The folder's place below the top of its work tree, `/`-ended; empty
    /// at the top.
    prefix: String,
    /// Places inside the folder that are never part of it (the run's own state).
    leave_out: Vec<PathBuf>,
    /// [`QUICK`] as git's environment.
    quick: Vec<(String, String)>,
}

impl Shadow {
    /// The shadow of `folder` (canonical), its files in `scratch`, leaving
    /// out `leave_out`; filled: what is in the folder now is in it.
    pub fn open(
        folder: &Path,
        scratch: &Path,
        leave_out: &[PathBuf],
    ) -> Result<Self, CheckoutError> {
        std::fs::create_dir_all(scratch)?;
        let name = format!("shadow.{}", crate::protocol::SessionId::new());
        let mut shadow = Self {
            folder: folder.to_owned(),
            index: scratch.join(format!("{name}.index")),
            own: None,
            prefix: String::new(),
            leave_out: leave_out.to_vec(),
            quick: super::config_env(&QUICK, 0),
        };
        match checkout::place(folder) {
            Ok(place) => {
                let head = git(
                    &place.root,
                    &["rev-parse", "--verify", "--quiet", "HEAD^{commit}"],
                    &[],
                )
                .unwrap_or_default();
                checkout::seed_index(&place.root, &shadow.index, &head)?;
                // Paths stored once per prefix: a smaller index to read and write.
                let version = ["update-index", "--index-version", "4"];
                git(&place.root, &version, &shadow.env())?;
                let prefix = place.prefix.to_string_lossy().into_owned();
                shadow.prefix = match prefix.trim_end_matches('/') {
                    "" => String::new(),
                    rest => format!("{rest}/"),
                };
            }
            Err(_) => {
                small_enough(folder, leave_out, MAX_FILES, MAX_BYTES)?;
                let own = scratch.join(format!("{name}.git"));
                let own_str = own.to_string_lossy().into_owned();
                git(folder, &["init", "--bare", "--quiet", &own_str], &[])?;
                shadow.own = Some(own);
            }
        }
        shadow.refresh_all()?;
        Ok(shadow)
    }

    /// The environment each of its gits runs with: its index, and
    /// [`QUICK`].
    fn env(&self) -> Vec<(&str, &OsStr)> {
        let mut env = vec![("GIT_INDEX_FILE", self.index.as_os_str())];
        env.extend(self.quick.iter().map(|(k, v)| (k.as_str(), OsStr::new(v))));
        // Its messages as this code reads them.
        env.push(("LC_ALL", OsStr::new("C")));
        if let Some(own) = &self.own {
            env.push(("GIT_DIR", own.as_os_str()));
            env.push(("GIT_WORK_TREE", self.folder.as_os_str()));
        }
        env
    }

    /// Brings the whole folder into the shadow.
    pub fn refresh_all(&self) -> Result<(), CheckoutError> {
        checkout::add_all(&self.folder, &self.env(), &self.leave_out)
    }

    /// Brings `paths` (relative to the folder; files or folders, present or
    /// gone) into the shadow, and nothing else; on any failure, the whole
    /// folder.
    pub fn refresh(&self, paths: &[PathBuf]) -> Result<(), CheckoutError> {
        let (present, gone): (Vec<&PathBuf>, Vec<&PathBuf>) = paths
            .iter()
            .partition(|p| std::fs::symlink_metadata(self.folder.join(p)).is_ok());
        let mut env = self.env();
        // The paths are names, not patterns.
        env.push(("GIT_LITERAL_PATHSPECS", OsStr::new("1")));
        let run = |args: &[&str], list: &[&PathBuf], ignored_ok: bool| {
            if list.is_empty() {
                return Ok(());
            }
            // On its input, as bytes: any name, any number of them.
            let mut names = Vec::new();
            for path in list {
                names.extend_from_slice(path.as_os_str().as_bytes());
                names.push(0);
            }
            let out = checkout::git_run(&self.folder, args, &env, names)?;
            // `add` exits 1 when a path it was given is ignored (it adds the
            // others): nothing to bring in.
            match out.status.code() {
                Some(0) => Ok(()),
                Some(1) if ignored_ok => Ok(()),
                _ => Err(checkout::failed(&self.folder, args, &out.stderr)),
            }
        };
        let from_input = ["--pathspec-from-file=-", "--pathspec-file-nul"];
        let rm = ["rm", "-r", "-q", "-f", "--cached", "--ignore-unmatch"];
        let done = run(&[&rm[..], &from_input].concat(), &gone, false).and_then(|()| {
            run(
                &[&["add", "--all"][..], &from_input].concat(),
                &present,
                true,
            )
        });
        // A path gone between the look and the add, say.
        done.or_else(|_| self.refresh_all())
    }

    /// The folder's tree as the shadow holds it now.
    pub fn tree(&self) -> Result<String, CheckoutError> {
        let env = self.env();
        if self.prefix.is_empty() {
            return git(&self.folder, &["write-tree"], &env);
        }
        let prefix = format!("--prefix={}", self.prefix);
        match git(&self.folder, &["write-tree", &prefix], &env) {
            // No tracked or added file in the folder: git has no tree for it.
            Err(CheckoutError::Git { message, .. }) if message.ends_with("not found") => {
                Ok(EMPTY_TREE.into())
            }
            written => written,
        }
    }

    /// The paths (relative to the folder) whose content differs between
    /// trees `from` and `to`.
    pub fn changed(&self, from: &str, to: &str) -> Result<Vec<PathChange>, CheckoutError> {
        checkout::changed_with(&self.folder, &self.env(), from, to)
    }

    /// The content of each blob of `oids`, or `None` for one larger than
    /// `limit` bytes (not read) or missing.
    pub fn blobs(
        &self,
        oids: &[&str],
        limit: u64,
    ) -> Result<HashMap<String, Option<Vec<u8>>>, CheckoutError> {
        let mut found: HashMap<String, Option<Vec<u8>>> =
            oids.iter().map(|oid| ((*oid).to_owned(), None)).collect();
        if oids.is_empty() {
            return Ok(found);
        }
        let env = self.env();
        // Sizes first, so that a large blob is never read.
        let sizes = self.batch(&["cat-file", "--batch-check"], oids, &env)?;
        let small: Vec<&str> = String::from_utf8_lossy(&sizes)
            .lines()
            .filter_map(|line| {
                let mut words = line.split(' ');
                let (oid, kind, size) = (words.next()?, words.next()?, words.next()?);
                let size: u64 = size.parse().ok()?;
                (kind == "blob" && size <= limit)
                    .then(|| oids.iter().copied().find(|o| *o == oid))?
            })
            .collect();
        if small.is_empty() {
            return Ok(found);
        }
        let out = self.batch(&["cat-file", "--batch"], &small, &env)?;
        // "<oid> blob <size>\n<content>\n", each.
        let mut rest = &out[..];
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            let header = String::from_utf8_lossy(&rest[..end]).into_owned();
            let mut words = header.split(' ');
            let (Some(oid), Some(_), Some(size)) = (words.next(), words.next(), words.next())
            else {
                break;
            };
            let Ok(size) = size.parse::<usize>() else {
                break;
            };
            let body = &rest[end + 1..];
            if body.len() < size {
                break;
            }
            found.insert(oid.to_owned(), Some(body[..size].to_vec()));
            rest = body.get(size + 1..).unwrap_or_default();
        }
        Ok(found)
    }

    /// Runs `args` with one line per `oids` on its input.
    fn batch(
        &self,
        args: &[&str],
        oids: &[&str],
        env: &[(&str, &OsStr)],
    ) -> Result<Vec<u8>, CheckoutError> {
        let input: Vec<u8> = oids
            .iter()
            .flat_map(|o| format!("{o}\n").into_bytes())
            .collect();
        checkout::git_fed(&self.folder, args, env, input)
    }
}

impl Drop for Shadow {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.index);
        if let Some(own) = &self.own {
            let _ = std::fs::remove_dir_all(own);
        }
    }
}

/// Whether `folder` (outside any repository) is small enough to shadow: a
/// walk that stops at the first file past `max_files` or `max_bytes`,
/// leaving out `.git` folders and `leave_out`.
fn small_enough(
    folder: &Path,
    leave_out: &[PathBuf],
    max_files: usize,
    max_bytes: u64,
) -> Result<(), CheckoutError> {
    let leave_out = leave_out.to_vec();
    // No ignore file is read (one that is a FIFO would hold the walk
    // forever): ignored files count too.
    let walk = ignore::WalkBuilder::new(folder)
        .standard_filters(false)
        .filter_entry(move |e| e.file_name() != ".git" && !leave_out.iter().any(|p| p == e.path()))
        .build();
    let (mut files, mut bytes) = (0usize, 0u64);
    for entry in walk.flatten() {
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        files += 1;
        bytes += entry.metadata().map_or(0, |m| m.len());
        if files > max_files || bytes > max_bytes {
            return Err(CheckoutError::TooLarge(folder.display().to_string()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
