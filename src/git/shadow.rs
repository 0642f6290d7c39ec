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

mod entries;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsStr;
use std::io::{BufRead, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use super::checkout::{self, Blob, CheckoutError, PathChange, git};
use entries::Entry;

/// A submodule's mode in an index: its commit is recorded.
const GITLINK: u32 = 0o160000;

/// The most files a folder outside a repository may hold to be shadowed.
pub const MAX_FILES: usize = 20_000;
/// The most bytes its files may hold together.
pub const MAX_BYTES: u64 = 128 * 1024 * 1024;

/// What makes a look at a few paths quick in a large index: no checksum of
/// the index (it is orchestrate's own, read by nobody else), no threads to
/// look at every entry when a few are asked for, and one flush to disk for
/// all the objects a command writes rather than one each. Its index is whole
/// in one file (a split index would write its shared part into the
/// repository's folder), every path an entry of its own (no sparse folder
/// entries), and an ignored path named to `add` is no advice.
const QUICK: [(&str, &str); 6] = [
    ("index.skipHash", "true"),
    ("core.preloadIndex", "false"),
    ("core.fsyncMethod", "batch"),
    ("core.splitIndex", "false"),
    ("index.sparse", "false"),
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
    /// In a repository, where the objects it writes go, and the
    /// repository's own (read beside them, as git's list of alternates
    /// spells one): nothing is added to the person's store.
    objects: Option<(PathBuf, String)>,
    /// The folder's place below the top of its work tree, `/`-ended; empty
    /// at the top.
    prefix: String,
    /// How long its repository's object ids are, in bytes.
    oid_len: usize,
    /// Places inside the folder that are never part of it (the run's own state).
    leave_out: Vec<PathBuf>,
    /// [`QUICK`] as git's environment.
    quick: Vec<(String, String)>,
    /// The git that reads its objects, once started.
    reader: std::sync::Mutex<Option<super::Conversation>>,
    /// Its `.held` file, locked while it is open.
    _held: std::fs::File,
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
        sweep(scratch);
        let name = format!("shadow.{}", crate::protocol::SessionId::new());
        // Locked while the shadow is open: what a killed run left is known
        // by its lock gone with it.
        let held = scratch.join(format!("{name}.held"));
        let held = std::fs::File::create(&held)?;
        rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive)
            .map_err(std::io::Error::from)?;
        let mut shadow = Self {
            _held: held,
            folder: folder.to_owned(),
            index: scratch.join(format!("{name}.index")),
            own: None,
            objects: None,
            prefix: String::new(),
            oid_len: 20,
            leave_out: leave_out.to_vec(),
            quick: super::config_env(&QUICK, 0),
            reader: std::sync::Mutex::new(None),
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
                let theirs = [
                    "rev-parse",
                    "--path-format=absolute",
                    "--git-path",
                    "objects",
                ];
                let theirs = alternate(&git(&place.root, &theirs, &[])?);
                let ours = scratch.join(format!("{name}.objects"));
                std::fs::create_dir(&ours)?;
                shadow.objects = Some((ours, theirs));
                // Paths stored once per prefix: a smaller index to read and write.
                let version = ["update-index", "--index-version", "4"];
                git(&place.root, &version, &shadow.env())?;
                let format = git(&place.root, &["rev-parse", "--show-object-format"], &[])?;
                shadow.oid_len = if format == "sha256" { 32 } else { 20 };
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
                // SHA-1 whatever the person's default: what its entries are read as.
                let init = [
                    "init",
                    "--bare",
                    "--quiet",
                    "--object-format=sha1",
                    &own_str,
                ];
                git(folder, &init, &[])?;
                shadow.own = Some(own);
            }
        }
        shadow.refresh_all()?;
        // An index this code cannot read is found now, not at the first look.
        shadow.entries(None)?;
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
        if let Some((ours, theirs)) = &self.objects {
            env.push(("GIT_OBJECT_DIRECTORY", ours.as_os_str()));
            env.push(("GIT_ALTERNATE_OBJECT_DIRECTORIES", OsStr::new(theirs)));
        }
        env
    }

    /// Brings the whole folder into the shadow.
    pub fn refresh_all(&self) -> Result<(), CheckoutError> {
        checkout::add_all(&self.folder, &self.env(), &self.leave_out)
    }

    /// Brings `named` (relative to the folder; files or folders, present or
    /// gone), or the whole folder when `None`, into the shadow: what changed
    /// in them since they were last brought in. A failure to bring in the
    /// paths named leaves the index as it was (git writes it whole or not at
    /// all), and the whole folder is compared instead.
    pub fn update(&self, named: Option<&[PathBuf]>) -> Result<Vec<PathChange>, CheckoutError> {
        if let Some(named) = named {
            let names: HashSet<Vec<u8>> = named
                .iter()
                .map(|p| p.as_os_str().as_bytes().to_vec())
                .collect();
            let before = self.entries(Some(&names))?;
            // A path inside a submodule is the submodule's: git records
            // its commit, not its files.
            let gitlinks = gitlinks(&before);
            let named: Vec<PathBuf> = named
                .iter()
                .map(|path| {
                    let bytes = path.as_os_str().as_bytes();
                    let holder =
                        (gitlinks.iter()).find(|g| g.len() < bytes.len() && at_or_below(bytes, g));
                    holder.map_or_else(|| path.clone(), |g| PathBuf::from(OsStr::from_bytes(g)))
                })
                .collect::<std::collections::BTreeSet<_>>()
                .into_iter()
                .collect();
            match self.add(&named, &before) {
                Ok(()) => return Ok(compared(before, self.entries(Some(&names))?)),
                Err(e) => {
                    tracing::debug!(folder = %self.folder.display(), "the whole folder instead: {e}")
                }
            }
        }
        let before = self.entries(None)?;
        self.refresh_all()?;
        Ok(compared(before, self.entries(None)?))
    }

    /// Brings `named` into the index, `before` being what it holds of them.
    /// When each is a file it holds (changed or gone), `update-index` of
    /// those files, which reads no folder; otherwise `add --all` of each
    /// present on disk or held, which looks for new files (and honours the
    /// ignore files) below them.
    fn add(&self, named: &[PathBuf], before: &[Entry]) -> Result<(), CheckoutError> {
        let files: HashSet<&[u8]> = before.iter().map(|e| e.path.as_slice()).collect();
        let gitlinks = gitlinks(before);
        let held: HashSet<&[u8]> = before.iter().flat_map(|e| places(&e.path)).collect();
        let on_disk = |path: &Path| std::fs::symlink_metadata(self.folder.join(path));
        let only_files = named.iter().all(|path| {
            let bytes = path.as_os_str().as_bytes();
            files.contains(bytes)
                && (gitlinks.contains(bytes) || !on_disk(path).is_ok_and(|m| m.is_dir()))
        });
        let (args, listed): (&[&str], Vec<&[u8]>) = if only_files {
            // A path the person marked skip-worktree (sparse checkout) is
            // left as it is, not taken for gone.
            let update = &[
                "update-index",
                "--add",
                "--remove",
                "--ignore-skip-worktree-entries",
                "-z",
                "--stdin",
            ];
            (update, files.into_iter().collect())
        } else {
            let add = &[
                "add",
                "--all",
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
            ];
            let listed = named
                .iter()
                .map(|p| p.as_os_str().as_bytes())
                .filter(|p| held.contains(p) || on_disk(Path::new(OsStr::from_bytes(p))).is_ok())
                .collect();
            (add, listed)
        };
        if listed.is_empty() {
            return Ok(());
        }
        // On its input, as bytes: any name, any number of them.
        let mut names = Vec::new();
        for path in listed {
            names.extend_from_slice(path);
            names.push(0);
        }
        let mut env = self.env();
        // The paths are names, not patterns.
        env.push(("GIT_LITERAL_PATHSPECS", OsStr::new("1")));
        let out = checkout::git_run(&self.folder, args, &env, names)?;
        // `add` exits 1 when a path it was given is ignored (it adds the
        // others): nothing to bring in.
        match out.status.code() {
            Some(0) => Ok(()),
            Some(1) if !only_files => Ok(()),
            _ => Err(checkout::failed(&self.folder, args, &out.stderr)),
        }
    }

    /// The shadow's entries in the folder (their paths relative to it),
    /// only those at or below `names`, or above one of them (a submodule
    /// holding it), when given.
    fn entries(&self, names: Option<&HashSet<Vec<u8>>>) -> Result<Vec<Entry>, CheckoutError> {
        let bytes = match std::fs::read(&self.index) {
            // Nothing was ever added to it.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            read => read?,
        };
        let prefix = self.prefix.as_bytes();
        // A few names are compared with each path; many are looked up by
        // each of its places.
        let few: Option<Vec<&[u8]>> = names
            .filter(|names| names.len() <= 32)
            .map(|names| names.iter().map(Vec::as_slice).collect());
        let above: HashSet<&[u8]> = (names.iter().flat_map(|names| names.iter()))
            .flat_map(|name| places(name).skip(1))
            .collect();
        let wanted = |path: &[u8]| {
            let Some(inside) = path.strip_prefix(prefix) else {
                return false;
            };
            match (&few, names) {
                (Some(few), _) => few
                    .iter()
                    .any(|name| at_or_below(inside, name) || at_or_below(name, inside)),
                (None, Some(names)) => {
                    above.contains(inside) || places(inside).any(|p| names.contains(p))
                }
                (None, None) => true,
            }
        };
        let mut found = entries::read(&bytes, self.oid_len, wanted)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?;
        for entry in &mut found {
            entry.path.drain(..prefix.len());
        }
        Ok(found)
    }

    /// The content of each blob of `oids`, or `None` for one larger than
    /// `limit` bytes (not read) or missing: asked of one git kept running
    /// (its start costs as much as its answers), the sizes first and then
    /// the contents of the small ones.
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
        let mut reader = self
            .reader
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let conversation = match reader.as_mut() {
            Some(conversation) => conversation,
            None => {
                let mut command = super::command(&self.folder);
                command
                    .args(["cat-file", "--batch-command", "--buffer"])
                    .envs(self.env());
                reader.insert(super::Conversation::start(command)?)
            }
        };
        let read = conversation.talk(|input, output| {
            let mut small = Vec::new();
            // Each question in one write.
            let mut asked: String = oids.iter().map(|oid| format!("info {oid}\n")).collect();
            asked.push_str("flush\n");
            input.write_all(asked.as_bytes())?;
            for _ in oids {
                // "<oid> blob <size>", or "<oid> missing".
                let line = line(output)?;
                let mut words = line.split(' ');
                let (oid, kind, size) = (words.next(), words.next(), words.next());
                let size = size.and_then(|s| s.parse::<u64>().ok());
                if let (Some(oid), Some("blob"), Some(size)) = (oid, kind, size)
                    && size <= limit
                {
                    small.push(oid.to_owned());
                }
            }
            let mut asked: String = small
                .iter()
                .map(|oid| format!("contents {oid}\n"))
                .collect();
            asked.push_str("flush\n");
            input.write_all(asked.as_bytes())?;
            let mut contents = Vec::new();
            for _ in &small {
                // "<oid> blob <size>\n<content>\n".
                let header = line(output)?;
                let mut words = header.split(' ');
                let oid = words.next().unwrap_or_default().to_owned();
                let size = words.nth(1).and_then(|s| s.parse::<u64>().ok());
                let size = size.filter(|s| *s <= limit).ok_or_else(|| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, header.clone())
                })?;
                let mut body = vec![0; size as usize + 1];
                output.read_exact(&mut body)?;
                body.pop();
                contents.push((oid, body));
            }
            Ok(contents)
        });
        // Out of step after an error: the next asks a new one.
        let read = read.inspect_err(|_| *reader = None)?;
        for (oid, body) in read {
            if let Some(slot) = found.get_mut(&oid) {
                *slot = Some(body);
            }
        }
        Ok(found)
    }
}

/// One line of `output`, without its end.
fn line(output: &mut impl BufRead) -> std::io::Result<String> {
    let mut line = String::new();
    if output.read_line(&mut line)? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(line.trim_end_matches('\n').to_owned())
}

/// `folder` as one entry of git's `:`-separated list of alternates: quoted
/// when it holds a `:` or starts with a quote.
fn alternate(folder: &str) -> String {
    if !folder.contains(':') && !folder.starts_with('"') {
        return folder.to_owned();
    }
    let escaped = folder.replace('\\', "\\\\").replace('"', "\\\"");
    format!("\"{escaped}\"")
}

/// The submodules among `entries`, by path.
fn gitlinks(entries: &[Entry]) -> HashSet<&[u8]> {
    (entries.iter())
        .filter(|e| e.mode == GITLINK)
        .map(|e| e.path.as_slice())
        .collect()
}

/// Whether `path` is `name` or below it.
fn at_or_below(path: &[u8], name: &[u8]) -> bool {
    path.strip_prefix(name)
        .is_some_and(|rest| rest.is_empty() || rest[0] == b'/')
}

/// `path` and each folder above it: `a/b/c`, `a/b`, `a`.
fn places(path: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::successors(Some(path), |p| {
        p.iter().rposition(|b| *b == b'/').map(|end| &p[..end])
    })
}

/// What differs between entries `before` and `after`, by path.
fn compared(before: Vec<Entry>, after: Vec<Entry>) -> Vec<PathChange> {
    let blob = |e: Entry| Blob {
        oid: e.oid,
        mode: format!("{:06o}", e.mode),
    };
    let mut paths: BTreeMap<Vec<u8>, (Option<Entry>, Option<Entry>)> = BTreeMap::new();
    for entry in before {
        let slot = paths.entry(entry.path.clone()).or_default();
        slot.0 = Some(entry);
    }
    for entry in after {
        let slot = paths.entry(entry.path.clone()).or_default();
        slot.1 = Some(entry);
    }
    paths
        .into_iter()
        .filter(|(_, (before, after))| before != after)
        .map(|(path, (before, after))| PathChange {
            path: PathBuf::from(OsStr::from_bytes(&path)),
            before: before.map(blob),
            after: after.map(blob),
        })
        .collect()
}

impl Drop for Shadow {
    fn drop(&mut self) {
        // Its reader first: it may hold its objects open.
        drop(self.reader.get_mut().map(Option::take));
        let _ = std::fs::remove_file(&self.index);
        let ours = self.objects.iter().map(|(ours, _)| ours);
        for place in self.own.iter().chain(ours) {
            let _ = std::fs::remove_dir_all(place);
        }
        // Last, its lock still held.
        let _ = std::fs::remove_file(self.index.with_extension("held"));
    }
}

/// Removes from `scratch` what shadows no longer open left (a run killed
/// before it could remove its own): each open shadow holds a lock on its
/// `.held` file, so one that can be locked is nobody's.
fn sweep(scratch: &Path) {
    let Ok(entries) = std::fs::read_dir(scratch) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".held")) else {
            continue;
        };
        let Ok(file) = std::fs::File::open(entry.path()) else {
            continue;
        };
        let lock = rustix::fs::FlockOperation::NonBlockingLockExclusive;
        if rustix::fs::flock(&file, lock).is_err() {
            continue;
        }
        for part in ["index", "objects", "git"] {
            let path = scratch.join(format!("{stem}.{part}"));
            let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
        }
        let _ = std::fs::remove_file(entry.path());
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
