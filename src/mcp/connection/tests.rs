use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::*;

/// A peer speaking MCP's stdio framing (one JSON-RPC message a line) by the
/// protocol's text: it initializes, lists one tool, says its tools changed,
/// lists two, then hangs up.
async fn server(stream: tokio::io::DuplexStream) {
    let (read, mut write) = tokio::io::split(stream);
    let mut lines = tokio::io::BufReader::new(read).lines();
    let mut listed = 0;
    while let Ok(Some(line)) = lines.next_line().await {
        let message: Value = serde_json::from_str(&line).unwrap();
        let (Some(id), Some(method)) = (message.get("id"), message["method"].as_str()) else {
            continue;
        };
        let tool = |name: &str| json!({"name": name, "inputSchema": {"type": "object"}});
        let reply = match method {
            "initialize" => json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": true}},
                "serverInfo": {"name": "scripted", "version": "1"},
            }}),
            "tools/list" => {
                listed += 1;
                let tools: Vec<Value> = ["first", "second"][..listed]
                    .iter()
                    .map(|n| tool(n))
                    .collect();
                json!({"jsonrpc": "2.0", "id": id, "result": {"tools": tools}})
            }
            _ => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "no such method"}})
            }
        };
        write
            .write_all(format!("{reply}\n").as_bytes())
            .await
            .unwrap();
        if method == "tools/list" && listed == 1 {
            let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
            write
                .write_all(format!("{changed}\n").as_bytes())
                .await
                .unwrap();
        }
        if listed == 2 {
            return;
        }
    }
}

#[tokio::test]
async fn a_changed_tool_list_is_listed_again_and_a_hang_up_ends_the_watch() {
    let (ours, theirs) = tokio::io::duplex(64 * 1024);
    let peer = tokio::spawn(server(theirs));
    let (tx, changed) = mpsc::unbounded_channel();
    let (read, write) = tokio::io::split(ours);
    let listener = Listener {
        changed: tx,
        server: "test".into(),
        progress: Default::default(),
    };
    let service = listener.serve((read, write)).await.unwrap();
    let limit = Duration::from_secs(30);
    let connection = listed("s", service, None, changed, limit).await.unwrap();
    let names =
        |tools: &[ToolInfo]| -> Vec<String> { tools.iter().map(|t| t.full_name.clone()).collect() };
    assert_eq!(names(&connection.tools), ["mcp__s__first"]);
    let relisted = Mutex::new(Vec::new());
    let ended = connection
        .watch("s", CancellationToken::new(), |tools| {
            relisted.lock().unwrap().push(names(&tools));
        })
        .await;
    assert_eq!(
        *relisted.lock().unwrap(),
        [vec![
            "mcp__s__first".to_owned(),
            "mcp__s__second".to_owned()
        ]]
    );
    assert_eq!(ended.as_deref(), Some("closed the connection"));
    peer.await.unwrap();
}

#[tokio::test]
async fn a_servers_program_gets_neither_key_variable_but_its_own_variables() {
    use tokio::io::AsyncReadExt;
    // CARGO_MANIFEST_DIR (cargo sets it for every test) stands for a configured
    // key variable: one the test's environment has.
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    let dir = tempfile::tempdir().unwrap();
    let script = "printf '[%s][%s]' \"$CARGO_MANIFEST_DIR\" \"$MINE\"".to_owned();
    let mut process = spawn(
        "sh",
        &["-c".to_owned(), script],
        &[("MINE".to_owned(), "given".to_owned())],
        dir.path(),
        &["CARGO_MANIFEST_DIR".to_owned()],
    )
    .unwrap();
    let mut out = String::new();
    let mut stdout = process.child.stdout.take().unwrap();
    stdout.read_to_string(&mut out).await.unwrap();
    assert_eq!(out, "[][given]");
}
