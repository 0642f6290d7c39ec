//! The shape of the house, checked from the code's own imports: no module imports a
//! module that imports it back.
//!
//! Modules form a tree (`crate::actors::session::…`). Every `use`, re-export or
//! inline path that names an item of another module (`crate::…`, `super::…`,
//! `self::…`, or a child module by its bare name) is an edge. An edge is lifted to
//! the two siblings under the modules' nearest common ancestor: an edge from
//! `tools::task` to `runtime` is an edge `tools → runtime` among the crate's top
//! modules. Among the children of every module the lifted edges must form no
//! circle. A module using its own ancestors or descendants is the tree itself
//! (`foo.rs` and `foo/`), not an edge. Test code (`#[cfg(test)]`) is left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

type Module = Vec<String>;

/// Where a lifted edge comes from, for the failure message.
#[derive(Clone, Debug)]
struct Use {
    file: String,
    path: String,
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = module_files(&src);
    let modules: BTreeSet<Module> = files.keys().cloned().collect();
    // Lifted edges, grouped by the parent whose children they connect.
    let mut levels: BTreeMap<Module, BTreeMap<(String, String), Vec<Use>>> = BTreeMap::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut paths = PathCollector::default();
        paths.visit_file(&ast);
        for path in paths.found {
            let Some(target) = resolve(module, &path, &modules) else {
                continue;
            };
            let common = common_prefix(module, &target);
            if common == module.len() || common == target.len() {
                continue; // an ancestor or a descendant
            }
            let parent = module[..common].to_vec();
            let edge = (module[common].clone(), target[common].clone());
            levels
                .entry(parent)
                .or_default()
                .entry(edge)
                .or_default()
                .push(Use {
                    file: file.strip_prefix(&src).unwrap().display().to_string(),
                    path: path.join("::"),
                });
        }
    }
    let mut circles = Vec::new();
    for (parent, edges) in &levels {
        for circle in circles_among(edges.keys()) {
            let scope = if parent.is_empty() {
                "crate".to_owned()
            } else {
                format!("crate::{}", parent.join("::"))
            };
            let mut text = format!(
                "circle among the modules of {scope}: {}",
                circle.join(" → ")
            );
            for pair in circle.windows(2) {
                let uses = &edges[&(pair[0].clone(), pair[1].clone())];
                let shown: Vec<String> = uses
                    .iter()
                    .take(3)
                    .map(|u| format!("{} uses {}", u.file, u.path))
                    .collect();
                text.push_str(&format!(
                    "\n  {} → {}: {}",
                    pair[0],
                    pair[1],
                    shown.join("; ")
                ));
            }
            circles.push(text);
        }
    }
    assert!(circles.is_empty(), "{}", circles.join("\n"));
}

#[test]
fn the_check_sees_a_circle_when_there_is_one() {
    let edges = [
        ("a".to_owned(), "b".to_owned()),
        ("b".to_owned(), "c".to_owned()),
        ("c".to_owned(), "a".to_owned()),
        ("c".to_owned(), "d".to_owned()),
    ];
    let circles = circles_among(edges.iter());
    assert_eq!(circles, [vec!["a", "b", "c", "a"]]);
    assert!(circles_among(edges[..2].iter()).is_empty());
}

#[test]
fn paths_resolve_to_the_module_that_holds_the_item() {
    let modules: BTreeSet<Module> = [
        vec![],
        vec!["actors".into()],
        vec!["actors".into(), "session".into()],
        vec!["runtime".into()],
    ]
    .into();
    let here: Module = vec!["actors".into(), "session".into()];
    let p = |s: &str| s.split("::").map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        resolve(&here, &p("crate::runtime::SessionSpec"), &modules),
        Some(vec!["runtime".to_owned()])
    );
    assert_eq!(
        resolve(&here, &p("super::AbortOnDrop"), &modules),
        Some(vec!["actors".to_owned()])
    );
    assert_eq!(resolve(&here, &p("std::sync::Arc"), &modules), None);
}

/// Every module file under `src/` by its module path (`main.rs` is its own crate).
fn module_files(src: &Path) -> BTreeMap<Module, PathBuf> {
    let mut files = BTreeMap::new();
    let mut stack = vec![src.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let relative = path.strip_prefix(src).unwrap().with_extension("");
            let mut module: Module = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            match module.as_slice() {
                [only] if only == "main" => continue,
                [only] if only == "lib" => module.clear(),
                _ => {}
            }
            files.insert(module, path);
        }
    }
    files
}

/// The module a path written in `here` names an item of (the longest module prefix
/// of its absolute form), or `None` for a path outside the crate.
fn resolve(here: &Module, path: &[String], modules: &BTreeSet<Module>) -> Option<Module> {
    let mut absolute: Module = here.clone();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            absolute.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                absolute.pop();
                rest = &rest[1..];
            }
        }
        Some(first) => {
            // A bare name is a path only when it is a child module of `here`.
            let mut child = here.clone();
            child.push(first.to_owned());
            if !modules.contains(&child) {
                return None;
            }
        }
        None => return None,
    }
    absolute.extend(rest.iter().cloned());
    (0..=absolute.len())
        .rev()
        .map(|n| absolute[..n].to_vec())
        .find(|m| modules.contains(m))
}

fn common_prefix(a: &Module, b: &Module) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Each circle of the directed graph `edges`, once, as the names along it with the
/// first repeated at the end.
fn circles_among<'a>(edges: impl Iterator<Item = &'a (String, String)>) -> Vec<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (from, to) in edges {
        next.entry(from.as_str()).or_default().push(to.as_str());
    }
    let mut circles: Vec<Vec<String>> = Vec::new();
    let mut seen_sets: BTreeSet<Vec<String>> = BTreeSet::new();
    let nodes: Vec<&str> = next.keys().copied().collect();
    for start in nodes {
        // Depth-first from `start`, looking for a way back to it.
        let mut stack: Vec<(&str, usize)> = vec![(start, 0)];
        let mut on_path: Vec<&str> = vec![start];
        while let Some((node, i)) = stack.pop() {
            let outs = next.get(node).map(Vec::as_slice).unwrap_or_default();
            if let Some(&to) = outs.get(i) {
                stack.push((node, i + 1));
                if to == start {
                    let mut circle: Vec<String> = on_path.iter().map(|s| (*s).to_owned()).collect();
                    let mut key = circle.clone();
                    key.sort();
                    if seen_sets.insert(key) {
                        circle.push(start.to_owned());
                        circles.push(circle);
                    }
                } else if !on_path.contains(&to) {
                    stack.push((to, 0));
                    on_path.push(to);
                }
            } else {
                on_path.pop();
            }
        }
    }
    circles
}

/// Collects every path of a file that could name an item of the crate, outside
/// `#[cfg(test)]` code: use trees (expanded), paths in code and types, and
/// `crate::…` inside macro invocations.
#[derive(Default)]
struct PathCollector {
    found: Vec<Vec<String>>,
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

impl PathCollector {
    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut path = prefix.clone();
                if n.ident != "self" {
                    path.push(n.ident.to_string());
                }
                self.found.push(path);
            }
            syn::UseTree::Rename(r) => {
                let mut path = prefix.clone();
                if r.ident != "self" {
                    path.push(r.ident.to_string());
                }
                self.found.push(path);
            }
            syn::UseTree::Glob(_) => self.found.push(prefix.clone()),
            syn::UseTree::Group(g) => {
                for tree in &g.items {
                    self.use_tree(prefix, tree);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for PathCollector {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if !is_test_only(attrs) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        self.use_tree(&mut Vec::new(), &item.tree);
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        if segments.len() > 1 {
            self.found.push(segments);
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        // Macro bodies are not parsed: look for `crate :: a :: b` in their tokens.
        let tokens: Vec<proc_macro2::TokenTree> = flatten(mac.tokens.clone());
        for (i, token) in tokens.iter().enumerate() {
            let proc_macro2::TokenTree::Ident(ident) = token else {
                continue;
            };
            if ident != "crate" {
                continue;
            }
            let mut path = vec!["crate".to_owned()];
            let mut j = i + 1;
            while let (
                Some(proc_macro2::TokenTree::Punct(a)),
                Some(proc_macro2::TokenTree::Punct(b)),
                Some(proc_macro2::TokenTree::Ident(name)),
            ) = (tokens.get(j), tokens.get(j + 1), tokens.get(j + 2))
            {
                if a.as_char() != ':' || b.as_char() != ':' {
                    break;
                }
                path.push(name.to_string());
                j += 3;
            }
            self.found.push(path);
        }
        syn::visit::visit_macro(self, mac);
    }
}

fn flatten(stream: proc_macro2::TokenStream) -> Vec<proc_macro2::TokenTree> {
    let mut out = Vec::new();
    for token in stream {
        match token {
            proc_macro2::TokenTree::Group(g) => out.extend(flatten(g.stream())),
            other => out.push(other),
        }
    }
    out
}
