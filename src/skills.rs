//! Claude Code's skills: folders `.claude/skills/<name>/` (the workspace's)
//! and `~/.claude/skills/<name>/` (the person's), each with a `SKILL.md`
//! (frontmatter `name`, `description`, `allowed-tools`, then instructions) and
//! any files beside it. The model sees each skill's name and description (in
//! the `Skill` tool's description) and loads one whole when it asks; the files
//! beside the person's skills are readable with Read (their folder is added
//! read-only). A role's `skills` field selects the skills it sees.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The most of a `SKILL.md` that is read.
const MAX_FILE: u64 = 256 * 1024;

/// One skill.
#[derive(Clone, Debug, PartialEq)]
pub struct Skill {
    /// Its name.
    pub name: String,
    /// What it is for (the model decides by it).
    pub description: String,
    /// The tools it says it uses.
    pub allowed_tools: Option<Vec<String>>,
    /// Its folder.
    pub dir: PathBuf,
    /// Its `SKILL.md`, whole.
    pub text: String,
}

/// The skills of a run, by name.
#[derive(Clone, Debug, Default)]
pub struct Skills {
    by_name: BTreeMap<String, Skill>,
    /// The folders of the person's skills (canonical), readable with Read.
    roots: Vec<PathBuf>,
}

impl Skills {
    /// The workspace's skills and the person's (`home`), the person's
    /// winning a name they share (a repository cannot take one over);
    /// warnings for skills that cannot be read.
    pub fn load(workspace: &Path, home: Option<&Path>) -> (Self, Vec<String>) {
        let mut skills = Self::default();
        let mut warnings = Vec::new();
        let own = home.map(|h| h.join(".claude/skills"));
        let theirs = workspace.join(".claude/skills");
        for (root, is_own) in [(Some(theirs), false), (own, true)] {
            let Some(root) = root.filter(|r| r.is_dir()) else {
                continue;
            };
            let Ok(entries) = std::fs::read_dir(&root) else {
                continue;
            };
            // The person's folders may be links they made; a repository's
            // are taken only as they are.
            let mut dirs: Vec<PathBuf> = entries
                .flatten()
                .filter(|e| match is_own {
                    true => e.path().is_dir(),
                    false => e.file_type().is_ok_and(|t| t.is_dir()),
                })
                .map(|e| match is_own {
                    true => e.path().canonicalize().unwrap_or_else(|_| e.path()),
                    false => e.path(),
                })
                .collect();
            dirs.sort();
            for dir in dirs {
                let file = dir.join("SKILL.md");
                if !file.exists() {
                    continue;
                }
                let read = match is_own {
                    true => crate::small_file::read_own(&file, MAX_FILE),
                    false => crate::small_file::read_within(workspace, &file, MAX_FILE),
                };
                let parsed = read
                    .map_err(|e| e.to_string())
                    .and_then(|text| parse(&dir, text));
                match parsed {
                    Ok(skill) => {
                        // Read may read beside the person's own.
                        if is_own && !skill.dir.starts_with(workspace) {
                            skills.roots.push(skill.dir.clone());
                        }
                        skills.by_name.insert(skill.name.clone(), skill);
                    }
                    Err(e) => warnings.push(format!("{e}; the skill is skipped")),
                }
            }
        }
        (skills, warnings)
    }

    /// The same without the skills `unusable` finds (each with why), and the
    /// warnings that say so.
    pub fn without_unusable(
        mut self,
        unusable: impl Fn(&Skill) -> Option<String>,
    ) -> (Self, Vec<String>) {
        let mut warnings = Vec::new();
        let mut skipped = Vec::new();
        self.by_name.retain(|_, skill| match unusable(skill) {
            Some(why) => {
                warnings.push(format!("{why}; the skill is skipped"));
                skipped.push(skill.dir.clone());
                false
            }
            None => true,
        });
        // Nor are its files readable.
        self.roots.retain(|root| !skipped.contains(root));
        (self, warnings)
    }

    /// The skills `names` selects (all of them for `None`).
    pub fn select(&self, names: Option<&[String]>) -> Self {
        let by_name = self
            .by_name
            .iter()
            .filter(|(name, _)| names.is_none_or(|n| n.contains(name)))
            .map(|(name, skill)| (name.clone(), skill.clone()))
            .collect();
        Self {
            by_name,
            roots: self.roots.clone(),
        }
    }

    /// The skill named `name`.
    pub fn get(&self, name: &str) -> Option<&Skill> {
        self.by_name.get(name)
    }

    /// Every skill, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Skill> {
        self.by_name.values()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The folders outside the workspace whose files Read may read.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }
}

/// The skill of folder `dir` whose `SKILL.md` says `text`.
fn parse(dir: &Path, text: String) -> Result<Skill, String> {
    let file = dir.join("SKILL.md");
    let body = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let front = body
        .strip_prefix("---\n")
        .and_then(|rest| rest.split_once("\n---").map(|(front, _)| front))
        .ok_or_else(|| format!("{}: no frontmatter (name, description)", file.display()))?;
    let fields: BTreeMap<String, serde_json::Value> = serde_saphyr::from_str(front)
        .map_err(|e| format!("{}: invalid frontmatter: {e}", file.display()))?;
    let text_of = |key: &str| {
        fields
            .get(key)
            .and_then(|v| v.as_str())
            .map(|s| s.trim().to_owned())
    };
    let folder = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let name = text_of("name").unwrap_or_else(|| folder.to_owned());
    let description = text_of("description")
        .filter(|d| !d.is_empty())
        .ok_or_else(|| format!("{}: no description", file.display()))?;
    // What a skill narrows to must be read as meant, or the skill is not
    // used: a list it cannot read would leave the session wider.
    let allowed_tools = crate::commands::allowed_tools(fields.get("allowed-tools"))
        .map_err(|e| format!("{}: {e}", file.display()))?;
    Ok(Skill {
        name,
        description,
        allowed_tools,
        dir: dir.to_owned(),
        text,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill(root: &Path, name: &str, front: &str) {
        let dir = root.join(".claude/skills").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            format!("---\n{front}\n---\nDo it well.\n"),
        )
        .unwrap();
        std::fs::write(dir.join("reference.md"), "details").unwrap();
    }

    #[test]
    fn skills_come_from_both_folders_the_person_s_winning_and_a_role_selects() {
        let ws = tempfile::tempdir().unwrap();
        let home = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        skill(
            home.path(),
            "pdf",
            "name: pdf\ndescription: Mine.\nallowed-tools: Read, Bash",
        );
        skill(home.path(), "charts", "description: Charts.");
        skill(&ws_path, "pdf", "name: pdf\ndescription: Ours.");
        skill(&ws_path, "broken", "name: broken");
        // A list it cannot read as meant would leave the session wider.
        skill(&ws_path, "num", "description: Num.\nallowed-tools: 5");
        let (skills, warnings) = Skills::load(&ws_path, Some(home.path()));
        let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["charts", "pdf"]);
        assert_eq!(skills.get("pdf").unwrap().description, "Mine.");
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings.iter().any(|w| w.contains("no description")));
        assert!(
            warnings
                .iter()
                .any(|w| w.contains("must be a list of tools"))
        );
        assert_eq!(skills.roots().len(), 2, "each of the person's skills");
        let only = skills.select(Some(&["charts".to_owned()]));
        assert!(only.get("pdf").is_none() && only.get("charts").is_some());
    }
}
