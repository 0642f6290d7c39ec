use super::*;

fn env(name: &str) -> Option<String> {
    match name {
        "HOME" => Some("/home/me".into()),
        "TOKEN" => Some("s3cret".into()),
        "EMPTY" => Some(String::new()),
        _ => None,
    }
}

fn workspace() -> Origin {
    Origin::Workspace("/w/.mcp.json".into())
}

#[test]
fn variables_expand_with_defaults_and_an_unset_one_is_named() {
    assert_eq!(expand("${HOME}/x", &env).unwrap(), "/home/me/x");
    assert_eq!(expand("a${NOPE:-b}c", &env).unwrap(), "abc");
    assert_eq!(expand("${EMPTY:-d}", &env).unwrap(), "d");
    assert_eq!(expand("${TOKEN:-d}", &env).unwrap(), "s3cret");
    assert_eq!(
        expand("cost $5 ${unclosed", &env).unwrap(),
        "cost $5 ${unclosed"
    );
    assert_eq!(
        expand("Bearer ${NOPE}", &env).unwrap_err(),
        "needs ${NOPE}, which is not set"
    );
}

#[test]
fn claude_codes_format_reads_both_transports() {
    let text = r#"{
  "mcpServers": {
    "files": {"command": "npx", "args": ["-y", "server-fs", "${HOME}/src"], "env": {"LOG": "${LVL:-info}"}},
    "docs": {"type": "http", "url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}
  }
}"#;
    let read = parse(text, &workspace(), &env).unwrap();
    assert!(read.warnings.is_empty(), "{:?}", read.warnings);
    let [docs, files] = &read.servers[..] else {
        panic!("{read:?}")
    };
    assert_eq!(
        files.transport,
        Transport::Stdio {
            command: "npx".into(),
            args: vec!["-y".into(), "server-fs".into(), "/home/me/src".into()],
            env: vec![("LOG".into(), "info".into())],
        }
    );
    // What a person trusts is what the file says, not what it expands to.
    assert_eq!(
        files.trust_key(),
        "files: LOG=${LVL:-info} npx -y server-fs ${HOME}/src"
    );
    assert_eq!(
        docs.transport,
        Transport::Http {
            url: "https://example.com/mcp".into(),
            headers: vec![("Authorization".into(), "Bearer s3cret".into())],
        }
    );
    assert_eq!(
        docs.written,
        "http https://example.com/mcp -H 'Authorization: Bearer ${TOKEN}'"
    );
}

#[test]
fn a_server_that_cannot_run_here_is_a_warning_and_the_rest_load() {
    let text = r#"{"mcpServers": {
  "old": {"type": "sse", "url": "https://example.com/sse"},
  "needs": {"command": "srv", "env": {"KEY": "${MISSING_KEY}"}},
  "ok": {"command": "srv"},
  "far": {"type": "http", "url": "${NOWHERE:-ftp://x}"}
}}"#;
    let read = parse(text, &workspace(), &env).unwrap();
    let names: Vec<&str> = read.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["ok"]);
    assert_eq!(
        read.warnings,
        [
            "/w/.mcp.json:5: MCP server \"far\" has the url \"ftp://x\", which is not http(s); it is not started",
            "/w/.mcp.json:3: MCP server \"needs\" needs ${MISSING_KEY}, which is not set; it is not started",
            "/w/.mcp.json:2: MCP server \"old\" uses the legacy SSE transport, which orchestrate does not speak (use its streamable-HTTP endpoint, type \"http\"); it is not started",
        ]
    );
}

#[test]
fn entries_written_wrong_are_errors_with_their_line() {
    let cases = [
        (
            "{\"mcpServers\": [1]}",
            (1, "mcpServers must be an object of servers by name"),
        ),
        (
            "{\"mcpServers\": {\n\"a\": {\"args\": []}}}",
            (2, "MCP server \"a\": command is required"),
        ),
        (
            "{\"mcpServers\": {\n\n\"b\": {\"command\": \"x\", \"args\": \"-v\"}}}",
            (
                3,
                "MCP server \"b\": args must be a list of strings, not \"-v\"",
            ),
        ),
        (
            "{\"mcpServers\": {\"bad name\": {\"command\": \"x\"}}}",
            (
                1,
                "MCP server \"bad name\": a server name may use only letters, digits, - and _ (at most 64)",
            ),
        ),
        (
            "{\"mcpServers\": {\"c\": {\"type\": \"ws\", \"url\": \"x\"}}}",
            (
                1,
                "MCP server \"c\": unknown type \"ws\" (known: stdio, http, streamable-http, sse)",
            ),
        ),
        (
            "{\"mcpServers\": {\"d\": {\"command\": \"x\", \"cwd\": \"/\"}}}",
            (
                1,
                "MCP server \"d\": unknown field \"cwd\" (expected: type, command, args, env, trustAnnotations)",
            ),
        ),
    ];
    for (text, (line, message)) in cases {
        assert_eq!(
            parse(text, &workspace(), &env).unwrap_err(),
            (line, message.to_owned()),
            "{text}"
        );
    }
    let (line, message) = parse("{\n\"mcpServers\": {,}}", &workspace(), &env).unwrap_err();
    assert_eq!(line, 2, "{message}");
    assert!(parse("{}", &workspace(), &env).unwrap().servers.is_empty());
}

#[test]
fn only_the_users_own_servers_and_roles_need_no_trust() {
    assert!(!Origin::User("~/.config/orchestrate/mcp.json".into()).needs_trust());
    assert!(workspace().needs_trust());
    let role = |trusted| Origin::Role {
        path: "a.md".into(),
        role: "a".into(),
        trusted,
    };
    assert!(role(false).needs_trust());
    assert!(!role(true).needs_trust());
}

#[test]
fn only_the_persons_own_file_can_trust_a_servers_annotations() {
    let text = r#"{"mcpServers": {"s": {"command": "x", "trustAnnotations": true}}}"#;
    let mine = parse(text, &Origin::User("/h/mcp.json".into()), &|_| None).unwrap();
    assert!(mine.servers[0].trust_annotations);
    assert!(mine.warnings.is_empty());
    let theirs = parse(text, &Origin::Workspace("/w/.mcp.json".into()), &|_| None).unwrap();
    assert!(!theirs.servers[0].trust_annotations);
    assert_eq!(
        theirs.warnings,
        [
            "/w/.mcp.json:1: MCP server \"s\": trustAnnotations is honoured only in ~/.config/orchestrate/mcp.json; its tools are gated as tools that change things"
        ]
    );
    let wrong = r#"{"mcpServers": {"s": {"command": "x", "trustAnnotations": "yes"}}}"#;
    assert!(parse(wrong, &Origin::User("/h/mcp.json".into()), &|_| None).is_err());
}
