//! `orchestrate sessions`: the workspace's runs, newest first, and one run's tree
//! of agents with its final answer. Everything is read from the journals
//! ([`crate::runs`]); nothing here runs a model.

mod checkouts;

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;
use std::time::SystemTime;

use super::exit;
use super::flags::{Cli, SessionsAction};
use super::setup;
use crate::protocol::{Outcome, SessionId};
use crate::runs::{self, Agent, Run, Summary};
use crate::ui::progress::{clock, dollars, tokens};

/// Runs `orchestrate sessions [list | show ID]`.
pub(super) fn run(
    cli: &Cli,
    action: Option<&SessionsAction>,
    env: &impl Fn(&str) -> Option<String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> ExitCode {
    let Some((workspace, state)) = setup::state_or_say(cli, env, err) else {
        return ExitCode::from(exit::USAGE);
    };
    setup::warn_of_old_state(&workspace, err);
    match action {
        None | Some(SessionsAction::List) => {
            let listing = runs::summaries(&state);
            for skipped in &listing.unreadable {
                let _ = writeln!(err, "orchestrate: warning: {skipped}; it is not listed");
            }
            for damaged in listing.runs.iter().flat_map(|r| &r.damaged) {
                let _ = writeln!(err, "orchestrate: warning: {damaged}");
            }
            let _ = write!(out, "{}", list(&listing.runs));
            ExitCode::from(exit::DONE)
        }
        Some(SessionsAction::Show { id }) => match runs::find(&state, Some(id)) {
            Ok(run) => {
                for damaged in &run.damaged {
                    let _ = writeln!(err, "orchestrate: warning: {damaged}");
                }
                let checkouts = checkouts::section(&run, &state, &workspace);
                let _ = write!(out, "{}", show(&run, &checkouts));
                ExitCode::from(exit::DONE)
            }
            Err(e) => {
                let _ = writeln!(err, "orchestrate: {e}");
                ExitCode::from(exit::USAGE)
            }
        },
        Some(SessionsAction::Prune { older_than }) => {
            let listing = runs::summaries(&state);
            let runs: Vec<Run> = listing
                .runs
                .iter()
                .filter_map(|r| runs::find(&state, Some(&r.id.to_string())).ok())
                .collect();
            let said = checkouts::prune(&runs, &state, &workspace, *older_than, SystemTime::now());
            if said.is_empty() {
                let _ = writeln!(out, "nothing to prune");
            }
            for line in said {
                let _ = writeln!(out, "{line}");
            }
            ExitCode::from(exit::DONE)
        }
    }
}

/// The table of runs.
pub(super) fn list(runs: &[Summary]) -> String {
    if runs.is_empty() {
        return "no runs in this workspace yet\n".to_owned();
    }
    let ids: Vec<SessionId> = runs.iter().map(|r| r.id).collect();
    let width = short_id_width(&ids);
    let mut text = format!(
        "{:<width$}  {:<17}  {:<11}  {:<14} {:>6} {:>7} {:>8}  task\n",
        "id", "started", "status", "lead", "agents", "tokens", "cost"
    );
    for run in runs {
        text.push_str(&format!(
            "{:<width$}  {:<17}  {:<11}  {:<14} {:>6} {:>7} {:>8}  {}\n",
            &run.id.to_string()[..width],
            utc_minute(run.started),
            run.status.name(),
            run.lead_role,
            run.agents,
            tokens(run.tokens),
            dollars(run.cost),
            clip(run.title.as_deref().unwrap_or(&run.task_line), 60),
        ));
    }
    text
}

/// One run: its agents as a tree, each with its outcome and counters, then
/// `checkouts` (what its isolated agents left, and its disk use), then the
/// lead's answer (or what it had said).
pub(super) fn show(run: &Run, checkouts: &str) -> String {
    let mut text = format!(
        "run {}  {}  started {}\ntask: {}\n\n",
        run.id,
        run.status.name(),
        utc_minute(run.started),
        run.task_line()
    );
    text.push_str(&format!(
        "{:<22} {:<11} {:>5} {:>6} {:>8} {:>8} {:>6}\n",
        "agent", "status", "turns", "tools", "tokens", "cost", "time"
    ));
    let mut instances: HashMap<&str, u32> = HashMap::new();
    for (agent, depth) in in_tree_order(&run.agents) {
        let label = if agent.parent.is_none() {
            agent.role.clone()
        } else {
            let n = instances.entry(&agent.role).or_insert(0);
            *n += 1;
            format!("{}#{n}", agent.role)
        };
        let indent = if depth == 0 {
            String::new()
        } else {
            format!("{}├ ", "  ".repeat(depth - 1))
        };
        text.push_str(&format!(
            "{:<22} {:<11} {:>5} {:>6} {:>8} {:>8} {:>6}\n",
            format!("{indent}{label}"),
            status(agent),
            agent.stats.turns,
            agent.stats.tool_calls,
            tokens(agent.tokens),
            dollars(agent.cost),
            clock(agent.stats.duration_ms)
        ));
    }
    text.push_str(&format!(
        "{:<22} {:<11} {:>5} {:>6} {:>8} {:>8}\n",
        "all agents",
        "",
        "",
        "",
        tokens(run.tokens()),
        dollars(run.cost())
    ));
    text.push_str(&format!("\n{checkouts}"));
    let (heading, answer) = match &run.lead().outcome {
        Some(Outcome::Completed { text, .. }) => ("answer", text.as_str()),
        Some(Outcome::Failed { message, .. }) => ("failed", message.as_str()),
        Some(
            Outcome::Cancelled { partial, .. }
            | Outcome::Partial { partial, .. }
            | Outcome::TimedOut { partial, .. },
        ) => ("said before it ended", partial.as_str()),
        None => ("interrupted; `orchestrate resume` carries on", ""),
    };
    text.push_str(&format!("\n{heading}:\n{answer}\n"));
    text
}

fn status(agent: &Agent) -> &'static str {
    match &agent.outcome {
        Some(Outcome::Completed { .. }) => "completed",
        Some(Outcome::Failed { .. }) => "failed",
        Some(Outcome::Cancelled { .. }) => "cancelled",
        Some(Outcome::Partial { .. }) => "partial",
        Some(Outcome::TimedOut { .. }) => "timed_out",
        None => "unfinished",
    }
}

/// The agents depth first, each after its parent, siblings in the order they
/// started, with their depth.
fn in_tree_order(agents: &[Agent]) -> Vec<(&Agent, usize)> {
    let mut ordered = Vec::with_capacity(agents.len());
    let mut stack: Vec<(&Agent, usize)> = agents
        .iter()
        .filter(|a| {
            a.parent
                .is_none_or(|p| !agents.iter().any(|b| b.session == p))
        })
        .rev()
        .map(|a| (a, 0))
        .collect();
    while let Some((agent, depth)) = stack.pop() {
        ordered.push((agent, depth));
        for child in agents
            .iter()
            .rev()
            .filter(|a| a.parent == Some(agent.session))
        {
            stack.push((child, depth + 1));
        }
    }
    ordered
}

/// How many characters of the ids tell them all apart (at least 8).
fn short_id_width(ids: &[SessionId]) -> usize {
    let texts: Vec<String> = ids.iter().map(ToString::to_string).collect();
    (8..36)
        .find(|&n| {
            let mut prefixes: Vec<&str> = texts.iter().map(|t| &t[..n]).collect();
            prefixes.sort_unstable();
            prefixes.windows(2).all(|w| w[0] != w[1])
        })
        .unwrap_or(36)
}

fn clip(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max - 1).collect();
    format!("{cut}…")
}

/// A time as `YYYY-MM-DD HH:MMZ` (UTC).
fn utc_minute(time: SystemTime) -> String {
    let secs = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn times_are_shown_in_utc_to_the_minute() {
        let at = |secs| SystemTime::UNIX_EPOCH + Duration::from_secs(secs);
        assert_eq!(utc_minute(at(0)), "1970-01-01 00:00Z");
        assert_eq!(utc_minute(at(1_795_372_260)), "2026-11-22 18:31Z");
        assert_eq!(utc_minute(at(951_782_400)), "2000-02-29 00:00Z");
    }
}
