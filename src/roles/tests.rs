//! Tests of `roles`.

use super::*;

const CODER: &str = "---\nname: coder\ndescription: Writes code.\ntools: Read, Edit, Bash\nmodel: inherit\nmaxTurns: 30\npermissionMode: acceptEdits\ncolor: green\n---\nYou write code.\n";

#[test]
fn a_claude_code_role_parses_whole() {
    let role = parse("agents/coder.md", CODER).unwrap();
    assert_eq!(
        role,
        Role {
            name: "coder".into(),
            description: "Writes code.".into(),
            tools: Some(vec!["Read".into(), "Edit".into(), "Bash".into()]),
            bash_rules: vec![],
            disallowed_tools: vec![],
            deny_rules: vec![],
            model: ModelChoice::Inherit,
            fallback_model: None,
            skills: None,
            max_turns: Some(30),
            budget: Budget::default(),
            permission_mode: Some(PermissionMode::AcceptEdits),
            color: Some("green".into()),
            isolation: None,
            check: None,
            check_attempts: None,
            placement: Placement::Any,
            placement_tags: Vec::new(),
            prompt: "You write code.".into(),
            source: "agents/coder.md".into(),
            mcp: RoleServers::default(),
            warnings: vec![],
        }
    );
}

#[test]
fn tools_may_be_a_yaml_list_and_ls_is_accepted_as_claude_code_spells_it() {
    let text = "---\nname: x\ndescription: d\ntools:\n  - Read\n  - LS\ndisallowedTools: [Bash]\n---\nbody";
    let role = parse("x.md", text).unwrap();
    assert_eq!(role.tools, Some(vec!["Read".into(), "Ls".into()]));
    assert_eq!(role.disallowed_tools, vec!["Bash".to_owned()]);
    assert_eq!(role.model, ModelChoice::Inherit);
}

#[test]
fn a_disallowed_rule_with_a_pattern_is_a_deny_rule_not_the_whole_tool() {
    let text = "---\nname: x\ndescription: d\ndisallowedTools: Bash(rm:*), Write\n---\nbody";
    let role = parse("x.md", text).unwrap();
    assert_eq!(role.disallowed_tools, vec!["Write".to_owned()]);
    assert_eq!(role.deny_rules[0].to_string(), "Bash(rm:*)");
    assert!(role.warnings.is_empty(), "{:?}", role.warnings);
    assert_eq!(
        role.allowed_tools(&["Read", "Bash", "Write"]),
        ["Read", "Bash"]
    );
}

#[test]
fn a_rule_with_a_comma_stays_whole() {
    let role = parse(
        "x.md",
        "---\nname: x\ndescription: d\ntools: Read, Bash(git log --format=%h,%s:*)\n---\n",
    )
    .unwrap();
    assert_eq!(role.tools, Some(vec!["Read".into(), "Bash".into()]));
    assert_eq!(
        role.bash_rules[0].to_string(),
        "Bash(git log --format=%h,%s:*)"
    );
}

#[test]
fn kode_roles_read_too() {
    let role = parse(
        "x.md",
        "---\nname: x\ndescription: d\ntools: \"*\"\nmodel_name: fast\n---\nGo.\n",
    )
    .unwrap();
    assert_eq!(role.tools, None, "* is every tool");
    assert_eq!(role.model, ModelChoice::Named("fast".into()));
    assert!(role.warnings.is_empty(), "{:?}", role.warnings);
}

#[test]
fn a_tool_not_provided_here_is_a_warning_and_the_role_loads() {
    let role = parse(
        "x.md",
        "---\nname: x\ndescription: d\ntools: Read, WebSearch, NotebookRead\n---\n",
    )
    .unwrap();
    assert_eq!(role.tools, Some(vec!["Read".into()]));
    assert_eq!(
        role.warnings,
        [
            "x.md:4: tool \"WebSearch\" is not available here; the role runs without it",
            "x.md:4: tool \"NotebookRead\" is not available here; the role runs without it",
        ]
    );
}

#[test]
fn each_malformed_case_has_its_exact_message() {
    let cases = [
        (
            "no frontmatter\n",
            "x.md:1: no YAML frontmatter: a role file starts with a line `---`",
        ),
        (
            "---\nname: x\n",
            "x.md:1: the frontmatter is never closed by a line `---`",
        ),
        ("---\ndescription: d\n---\n", "x.md:1: name is required"),
        ("---\nname: x\n---\n", "x.md:1: description is required"),
        (
            "---\nname: coder\ndescription: d\npermissionMode: yolo\n---\n",
            "x.md:4: unknown permissionMode \"yolo\"",
        ),
        (
            "---\nname: x\ndescription: d\nmaxTurns: -3\n---\n",
            "x.md:4: maxTurns must be a positive whole number, not -3",
        ),
        (
            "---\nname: x\ndescription: d\ncolor: mauve\n---\n",
            "x.md:4: unknown color \"mauve\" (known: red, blue, green, yellow, purple, orange, pink, cyan, gray)",
        ),
        (
            "---\nname: two words\ndescription: d\n---\n",
            "x.md:2: name \"two words\" may use only letters, digits, - and _",
        ),
        (
            "---\nname: x\ndescription: [a, b]\n---\n",
            "x.md:3: description must be a string, not [\"a\",\"b\"]",
        ),
    ];
    for (text, expected) in cases {
        assert_eq!(
            parse("x.md", text).unwrap_err().to_string(),
            expected,
            "{text:?}"
        );
    }
    let bad_yaml = parse("x.md", "---\nname: x\ndescription: d\ntools: [Read\n---\n").unwrap_err();
    assert!(bad_yaml.to_string().starts_with("x.md:"), "{bad_yaml}");
    assert!(
        bad_yaml.message.starts_with("invalid frontmatter:"),
        "{bad_yaml}"
    );
}

#[test]
fn other_claude_code_fields_are_accepted_with_one_warning_each() {
    let text = "---\nname: x\ndescription: d\nhooks: {}\nmemory: project\ncolour: red\n---\n";
    let role = parse("x.md", text).unwrap();
    assert_eq!(
        role.warnings,
        vec![
            "x.md:6: colour is not a role field and is ignored (did you mean color?)".to_owned(),
            "x.md:4: hooks is not supported yet and is ignored".to_owned(),
            "x.md:5: memory is not supported yet and is ignored".to_owned(),
        ]
    );
}

#[test]
fn a_role_gets_its_own_tools_less_its_disallowed_ones() {
    let role = parse(
        "x.md",
        "---\nname: x\ndescription: d\ntools: Read, Bash, Edit\ndisallowedTools: Edit\n---\n",
    )
    .unwrap();
    assert_eq!(role.allowed_tools(&["Read", "Grep", "Edit"]), ["Read"]);
    let all = parse("all.md", "---\nname: all\ndescription: d\n---\n").unwrap();
    assert_eq!(all.allowed_tools(&["Read", "Grep"]), ["Read", "Grep"]);
}

#[test]
fn mcp_servers_are_names_and_definitions_and_a_bad_one_is_located() {
    let role = parse(
        "a.md",
        "---\nname: a\ndescription: d\nmcpServers:\n  - github\n  - own:\n      command: srv\n      args: [\"-v\"]\n---\nGo.\n",
    )
    .unwrap();
    assert_eq!(role.mcp.named, ["github"]);
    assert_eq!(
        role.mcp.defined.get("own"),
        Some(&serde_json::json!({"command": "srv", "args": ["-v"]}))
    );
    // A block value is located where it starts.
    assert_eq!(role.mcp.line, 5);
    assert!(role.warnings.is_empty(), "{:?}", role.warnings);
    let bad = parse(
        "b.md",
        "---\nname: b\ndescription: d\nmcpServers:\n  own:\n    args: []\n---\n",
    )
    .unwrap_err();
    assert_eq!(
        bad.to_string(),
        "b.md:5: MCP server \"own\": command is required"
    );
    let bad = parse("c.md", "---\nname: c\ndescription: d\nmcpServers: 3\n---\n").unwrap_err();
    assert_eq!(
        bad.to_string(),
        "c.md:4: mcpServers must be a list or an object of servers, not 3"
    );
}

mod properties {
    use proptest::prelude::*;

    use super::super::parse;

    proptest! {
        /// A role file of any text is a role or an error naming where, never a
        /// panic.
        #[test]
        fn any_text_is_a_role_or_a_located_error(text in "(---\n)?[ -~\n]{0,200}(---\n)?[ -~\n]{0,40}") {
            if let Err(e) = parse("agents/x.md", &text) {
                prop_assert!(e.to_string().starts_with("agents/x.md"), "{}", e);
            }
        }

        /// What a role file says is what the role is.
        #[test]
        fn a_written_role_reads_back(
            name in "[a-z][a-z0-9-]{0,12}",
            description in "[A-Za-z][A-Za-z .,]{0,40}",
            tools in proptest::collection::vec(proptest::sample::select(vec!["Read", "Write", "Edit", "Grep", "Glob", "Ls", "Bash", "Task"]), 0..4),
            turns in 1u32..100,
            prompt in "[A-Za-z][A-Za-z .,\n]{0,80}",
        ) {
            let text = format!(
                "---\nname: {name}\ndescription: {description}\ntools: {}\nmaxTurns: {turns}\n---\n{prompt}\n",
                tools.join(", ")
            );
            let role = parse("x.md", &text).unwrap();
            prop_assert_eq!(&role.name, &name);
            prop_assert_eq!(role.description.trim(), description.trim());
            prop_assert_eq!(role.max_turns, Some(turns));
            let mut want: Vec<String> = Vec::new();
            for t in &tools {
                if !want.iter().any(|w| w == t) {
                    want.push((*t).to_owned());
                }
            }
            if !want.is_empty() {
                prop_assert_eq!(role.tools, Some(want));
            }
            prop_assert_eq!(role.prompt.trim(), prompt.trim());
        }
    }
}

#[test]
fn isolation_is_claude_codes_field_and_values() {
    let role = |value: &str| {
        parse(
            "w.md",
            &format!("---\nname: w\ndescription: d\nisolation: {value}\n---\nx\n"),
        )
    };
    assert_eq!(
        role("worktree").unwrap().isolation,
        Some(Isolation::Worktree)
    );
    assert_eq!(role("none").unwrap().isolation, Some(Isolation::None));
    let wrong = role("container").unwrap_err();
    assert_eq!(
        wrong.to_string(),
        "w.md:4: unknown isolation \"container\" (expected worktree or none)"
    );
}

#[test]
fn a_check_and_its_attempts_are_read() {
    let role = |fields: &str| {
        parse(
            "c.md",
            &format!("---\nname: c\ndescription: d\n{fields}\n---\nx\n"),
        )
    };
    let checked = role("check: cargo test\ncheckAttempts: 2").unwrap();
    assert_eq!(checked.check.as_deref(), Some("cargo test"));
    assert_eq!(checked.check_attempts, Some(2));
    assert_eq!(
        role("check: make\ncheckAttempts: 0")
            .unwrap_err()
            .to_string(),
        "c.md:5: checkAttempts must be a whole number from 1 to 100, not 0"
    );
}

#[test]
fn a_role_names_the_model_it_falls_back_to() {
    let text =
        "---\nname: a\ndescription: d\nmodel: sonnet\nfallbackModel: haiku\n---\nYou work.\n";
    let role = parse("agents/a.md", text).unwrap();
    assert_eq!(role.fallback_model.as_deref(), Some("haiku"));
    assert!(role.warnings.is_empty(), "{:?}", role.warnings);
}

#[test]
fn a_misspelt_field_is_named_with_the_closest_known_one() {
    let text = "---\nname: a\ndescription: d\nmaxturns: 3\ndisalowedTools: Bash\ncolour: red\nflavor: mint\n---\nYou work.\n";
    let role = parse("agents/a.md", text).unwrap();
    let said = role.warnings.join("\n");
    assert!(
        said.contains(
            "agents/a.md:4: maxturns is not a role field and is ignored (did you mean maxTurns?)"
        ),
        "{said}"
    );
    assert!(
        said.contains(
            "disalowedTools is not a role field and is ignored (did you mean disallowedTools?)"
        ),
        "{said}"
    );
    assert!(
        said.contains("colour is not a role field and is ignored (did you mean color?)"),
        "{said}"
    );
    assert!(
        said.contains("flavor is not a role field and is ignored\n")
            || said.ends_with("flavor is not a role field and is ignored"),
        "{said}"
    );
}

#[test]
fn a_roles_placement_and_its_tags_are_read_and_checked() {
    let role = |front: &str| {
        parse(
            "w.md",
            &format!("---\nname: w\ndescription: d\n{front}---\nx\n"),
        )
    };
    assert_eq!(role("").unwrap().placement, Placement::Any);
    let remote = role("placement: remote\nplacementTags: [gpu, big-mem]\n").unwrap();
    assert_eq!(remote.placement, Placement::Remote);
    assert_eq!(remote.placement_tags, ["gpu", "big-mem"]);
    assert!(remote.warnings.is_empty(), "{:?}", remote.warnings);
    assert_eq!(
        role("placement: local\n").unwrap().placement,
        Placement::Local
    );
    assert_eq!(
        role("placement: cloud\n").unwrap_err().to_string(),
        "w.md:4: unknown placement \"cloud\" (expected local, remote or any)"
    );
    let bad = role("placementTags: [\"a.b\"]\n").unwrap_err().to_string();
    assert!(bad.contains("placementTags: \"a.b\" is not a tag"), "{bad}");
    let empty = role("placementTags: [\"\"]\n").unwrap_err().to_string();
    assert!(empty.contains("is not a tag"), "{empty}");
    let many = role("placementTags: [a, b, c, d, e]\n")
        .unwrap_err()
        .to_string();
    assert!(many.contains("at most 4 tags"), "{many}");
    // A role's MCP servers run on this machine: so must it.
    assert_eq!(
        role("placement: remote\nmcpServers: [github]\n")
            .unwrap_err()
            .to_string(),
        "w.md:4: placement remote: a role with mcpServers runs on this machine, where its servers are"
    );
    let any = role("mcpServers: [github]\n").unwrap();
    assert_eq!(any.runs_where(), Placement::Local);
    assert_eq!(role("").unwrap().runs_where(), Placement::Any);
}
