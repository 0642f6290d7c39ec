//! What comparing a Bash command's folder before and after it costs (Bash's
//! edits as diffs): calls in a git repository of 10 000 files (400 folders of
//! 25), run as the Bash tool runs them, with the runtime's comparison and
//! without (the bare tool), interleaved. Commands that change nothing, one
//! file, and ten; and the first call in a folder, which makes the shadow
//! index and the watch.
//!
//! Run with `cargo bench --bench bash_edits` (`EDITS_ROUNDS`, default 20,
//! calls of each kind). Prints, for each kind, the median and the range of
//! the wall time per call, and the files told. The bare calls run in a
//! second repository alike, so that their changes are not seen by the
//! compared calls' watch.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

mod support;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use orchestrate::tools::bash::{Bash, Trees};
use orchestrate::{SessionId, Tool, ToolContext};

/// A repository of 10 000 committed files.
fn repository(root: &Path) {
    for d in 0..400 {
        let dir = root.join(format!("src/m{}/d{d}", d % 20));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..25 {
            std::fs::write(dir.join(format!("f{f}.txt")), format!("line {d} {f}\n")).unwrap();
        }
    }
    std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
    support::git(root, &["init", "-q"]);
    support::git(root, &["add", "."]);
    support::git(root, &["commit", "-q", "-m", "files"]);
}

/// One call of `command`; its wall ms and the files it told.
async fn call(ctx: &ToolContext, command: &str) -> (f64, usize) {
    let input = serde_json::json!({ "command": command });
    let start = Instant::now();
    Bash::default().call(input, ctx).await.unwrap();
    let wall = start.elapsed().as_secs_f64() * 1000.0;
    (wall, ctx.changes.take().len())
}

fn line(name: &str, mut walls: Vec<f64>, told: usize) {
    walls.sort_by(f64::total_cmp);
    let median = walls[walls.len() / 2];
    println!(
        "{name:<34} median {median:6.2} ms  min {:6.2}  max {:6.2}  files told {told}",
        walls[0],
        walls[walls.len() - 1]
    );
}

#[tokio::main]
async fn main() {
    let rounds = support::env_or("EDITS_ROUNDS", 20);
    let dir = tempfile::tempdir().unwrap();
    // Two alike: the bare calls' changes are not the compared calls' to see.
    let made = |name: &str| {
        let root = dir.path().join(name);
        std::fs::create_dir(&root).unwrap();
        let root = root.canonicalize().unwrap();
        repository(&root);
        root
    };
    let (root, bare_root) = (made("repo"), made("bare"));
    let scratch = dir.path().join("scratch");

    // The first call in a folder, each in a runtime of its own.
    let mut first = Vec::new();
    for _ in 0..rounds.min(5) {
        let mut ctx = ToolContext::new(root.clone(), SessionId::new());
        ctx.trees = Arc::new(Trees::new(scratch.clone()));
        first.push(call(&ctx, "true").await.0);
    }

    let bare = ToolContext::new(bare_root, SessionId::new());
    let mut compared = ToolContext::new(root.clone(), SessionId::new());
    compared.trees = Arc::new(Trees::new(scratch.clone()));
    call(&compared, "true").await;
    let cases: [(&str, &str, usize); 3] = [
        ("nothing changed", "true", 0),
        ("one file changed", "echo x >> src/m1/d1/f1.txt", 1),
        (
            "ten files changed",
            "for f in 0 1 2 3 4 5 6 7 8 9; do echo x >> src/m2/d2/f$f.txt; done",
            10,
        ),
    ];
    for (name, command, files) in cases {
        let (mut without, mut with) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            without.push(call(&bare, command).await.0);
            let (wall, told) = call(&compared, command).await;
            assert_eq!(told, files, "{name}");
            with.push(wall);
        }
        line(&format!("{name}, bare"), without, 0);
        line(&format!("{name}, compared"), with, files);
    }
    line("first call in a folder, compared", first, 0);
}
