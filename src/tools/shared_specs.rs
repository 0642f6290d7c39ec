//! One copy of each list of tool specs the process offers. A request carries
//! every tool's name, description and schema (about 14 KB of JSON for the standard
//! tools, several times that as a JSON tree), and each streaming request holds its
//! list while the answer streams: a thousand sub-agents of one role would hold a
//! thousand equal copies. Lists are compared by content and kept weakly, so a list
//! no request holds any more is gone.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use crate::llm::ToolSpec;

/// Live lists by a hash of their names and descriptions (schemas are compared, not
/// hashed: a JSON tree has no hash).
type Lists = HashMap<u64, Vec<Weak<[ToolSpec]>>>;

/// The one shared copy of a list equal to `specs`: a live one, or `specs` itself,
/// kept for the next caller.
pub(crate) fn shared(specs: Vec<ToolSpec>) -> Arc<[ToolSpec]> {
    static LISTS: OnceLock<Mutex<Lists>> = OnceLock::new();
    let lists = LISTS.get_or_init(Mutex::default);
    // Hashed before the lock is taken, and an unused copy freed after: every
    // session's turn takes it.
    let key = key(&specs);
    let (list, unused) = share(
        &mut lists.lock().unwrap_or_else(PoisonError::into_inner),
        key,
        specs,
    );
    drop(unused);
    list
}

/// The shared list equal to `specs` (whose [`key`] is `key`), and `specs` when a
/// live one was found.
fn share(
    lists: &mut Lists,
    key: u64,
    specs: Vec<ToolSpec>,
) -> (Arc<[ToolSpec]>, Option<Vec<ToolSpec>>) {
    if let Some(live) = lists
        .get(&key)
        .into_iter()
        .flatten()
        .filter_map(Weak::upgrade)
        .find(|live| **live == *specs)
    {
        return (live, Some(specs));
    }
    // A new list: the lists nobody holds any more go first.
    lists.retain(|_, bucket| {
        bucket.retain(|list| list.strong_count() > 0);
        !bucket.is_empty()
    });
    let list: Arc<[ToolSpec]> = specs.into();
    lists.entry(key).or_default().push(Arc::downgrade(&list));
    (list, None)
}

fn key(specs: &[ToolSpec]) -> u64 {
    let mut hasher = DefaultHasher::new();
    for spec in specs {
        spec.name.hash(&mut hasher);
        spec.description.hash(&mut hasher);
    }
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn shared_in(
        lists: &mut Lists,
        specs: Vec<ToolSpec>,
    ) -> (Arc<[ToolSpec]>, Option<Vec<ToolSpec>>) {
        share(lists, key(&specs), specs)
    }

    fn spec(name: &str, required: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("{name} does things"),
            parameters: json!({"type": "object", "required": [required]}),
        }
    }

    #[test]
    fn equal_lists_are_one_copy_and_a_different_schema_is_another() {
        let mut lists = Lists::new();
        let both = || vec![spec("Read", "path"), spec("Bash", "command")];
        let (first, unused) = shared_in(&mut lists, both());
        assert!(unused.is_none(), "a new list is kept");
        let (again, unused) = shared_in(&mut lists, both());
        assert!(Arc::ptr_eq(&first, &again));
        assert!(
            unused.is_some(),
            "an equal list is handed back, to be freed"
        );
        // Same names and descriptions, another schema: not the same list.
        let (other, _) = shared_in(
            &mut lists,
            vec![spec("Read", "file"), spec("Bash", "command")],
        );
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(other[0].parameters["required"][0], "file");
    }

    #[test]
    fn a_list_nobody_holds_is_let_go() {
        let mut lists = Lists::new();
        drop(shared_in(&mut lists, vec![spec("Read", "path")]).0);
        let (next, _) = shared_in(&mut lists, vec![spec("Grep", "pattern")]);
        assert_eq!(
            lists.values().flatten().count(),
            1,
            "the dropped list is forgotten"
        );
        let (fresh, _) = shared_in(&mut lists, vec![spec("Read", "path")]);
        assert!(!Arc::ptr_eq(&fresh, &next));
        assert_eq!(fresh[0].name, "Read");
    }
}
