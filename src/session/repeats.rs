//! Loop detection: a model that makes the same tool call (name and arguments)
//! turn after turn (alone or among others) is told so on the third turn in a
//! row, and stopped (reason `loop`) on the fifth, that call not run. The same
//! call made twice in one turn (several reads at once) is one time. Pure code.

use std::collections::HashMap;

use serde_json::Value;

use crate::conversation::{ToolCall, ToolResult};

/// The repetition at which a call's result carries a note.
pub(crate) const NOTE_AT: u32 = 3;
/// The repetition at which the agent is stopped.
pub(crate) const STOP_AT: u32 = 5;
/// The terminal outcome's reason when a loop stops an agent.
pub(crate) const LOOP: &str = "loop";

/// Counts the same calls made again and again, turn after turn: a model that
/// repeats a whole turn of several calls is caught too.
#[derive(Debug, Default)]
pub(crate) struct Repeats {
    /// Each call of the last two turns: how many turns in a row it was made,
    /// and the last turn it was made in.
    seen: HashMap<(String, String), (u32, u32)>,
    /// The turn the map was last pruned for.
    pruned: u32,
}

impl Repeats {
    /// Sees the next call the model made, in model turn `turn`; returns how many
    /// times in a row it has now been made (1: a new call). Arguments are
    /// compared as JSON values, so spacing and key order do not make a call new.
    pub(crate) fn see(&mut self, turn: u32, call: &ToolCall) -> u32 {
        let arguments = match serde_json::from_str::<Value>(&call.arguments) {
            // serde_json's maps are ordered by key: one text per value.
            Ok(value) => value.to_string(),
            Err(_) => call.arguments.trim().to_owned(),
        };
        let key = (call.name.clone(), arguments);
        let count = match self.seen.get(&key) {
            Some(&(count, last)) if last == turn => count,
            Some(&(count, last)) if last + 1 == turn => count + 1,
            Some(_) | None => 1,
        };
        self.seen.insert(key, (count, turn));
        // Once per turn, not per call: a turn may make thousands of calls.
        if self.pruned != turn {
            self.pruned = turn;
            self.seen.retain(|_, (_, last)| *last + 1 >= turn);
        }
        count
    }
}

/// What is added to the result of a call made `count` times in a row.
pub(crate) fn note(count: u32) -> String {
    format!(
        "\n\n[Note: you have now made this exact call, with these arguments, {count} times in \
         a row; its result will not change. Do something else, or give your answer. At \
         {STOP_AT} times in a row you will be stopped.]"
    )
}

/// The result of a call made [`STOP_AT`] times in a row: not run.
pub(crate) fn refused(call: &ToolCall) -> ToolResult {
    ToolResult {
        tool_call_id: call.id.clone(),
        content: format!(
            "Error: this call was not run: it is the same call, with the same arguments, made \
             {STOP_AT} times in a row. You are stopped here."
        ),
        is_error: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[test]
    fn the_same_call_counts_up_and_another_starts_over() {
        let mut r = Repeats::default();
        assert_eq!(r.see(1, &call("Read", r#"{"path":"a","limit":5}"#)), 1);
        // Spacing and key order do not make it another call.
        assert_eq!(r.see(2, &call("Read", r#"{ "limit": 5, "path": "a" }"#)), 2);
        assert_eq!(r.see(3, &call("Read", r#"{"path":"a","limit":5}"#)), 3);
        // Made twice in one turn: once.
        assert_eq!(r.see(3, &call("Read", r#"{"path":"a","limit":5}"#)), 3);
        assert_eq!(r.see(4, &call("Read", r#"{"path":"b","limit":5}"#)), 1);
        assert_eq!(r.see(5, &call("Glob", r#"{"path":"b","limit":5}"#)), 1);
        assert_eq!(r.see(6, &call("Glob", "not json")), 1);
        assert_eq!(r.see(7, &call("Glob", "not json ")), 2);
    }

    #[test]
    fn a_whole_turn_repeated_counts_every_call_of_it() {
        let mut r = Repeats::default();
        for turn in 1..=4 {
            assert_eq!(r.see(turn, &call("Read", r#"{"path":"a"}"#)), turn);
            assert_eq!(r.see(turn, &call("Read", r#"{"path":"b"}"#)), turn);
        }
        // Skipping a turn starts over.
        assert_eq!(r.see(6, &call("Read", r#"{"path":"a"}"#)), 1);
    }
}
