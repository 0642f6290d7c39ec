//! `orchestrate resume [ID] [PROMPT]` and `orchestrate -c PROMPT`: which run to
//! continue and how. A run cut off by a crash carries on where its journals end; a
//! run that ended takes the prompt as a follow-up in the same conversation, and
//! without one prints how it ended. The running itself is `run`'s.

use std::process::ExitCode;

use super::flags::Cli;
use super::run::{self, Lead};
use super::setup;
use super::{Io, exit};
use crate::runs::{self, RunStatus};

/// Resumes the run a prefix of whose id is `id` (the latest run without one).
pub(super) async fn resume<E, I>(
    cli: Cli,
    id: Option<String>,
    prompt: Option<String>,
    io: Io<'_, E, I>,
) -> ExitCode
where
    E: Fn(&str) -> Option<String>,
    I: FnMut() -> futures::future::BoxFuture<'static, ()>,
{
    let err = &mut *io.err;
    let state = match setup::state(&cli, &io.env) {
        Ok((workspace, state)) => {
            setup::warn_of_old_state(&workspace, err);
            state
        }
        Err(e) => {
            let _ = writeln!(err, "orchestrate: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    let (prefix, prompt) = run_and_prompt(id, prompt);
    let (run, spent) = match runs::find_with_spent(&state, prefix.as_deref()) {
        Ok(run) => run,
        Err(e) => {
            let _ = writeln!(err, "orchestrate: {e}");
            return ExitCode::from(exit::USAGE);
        }
    };
    for damaged in &run.damaged {
        let _ = writeln!(err, "orchestrate: warning: {damaged}");
    }
    if run.status == RunStatus::Running
        && let Some(holder) = runs::lock::holder(&state, run.id)
    {
        let _ = writeln!(
            err,
            "orchestrate: run {} is live in {holder}; wait for it to end, or stop it",
            run.id
        );
        return ExitCode::from(exit::USAGE);
    }
    let lead = run.lead();
    if lead.outcome.is_none() && !lead.unfinished && prompt.is_none() {
        // Its process died before its task was saved: there is nothing to carry on.
        let _ = writeln!(
            err,
            "orchestrate: run {} has nothing to carry on (its process died before its task was saved); give a PROMPT",
            run.id
        );
        return ExitCode::from(exit::USAGE);
    }
    match (&lead.outcome, prompt) {
        // It ended, and nothing more is asked: how it ended, as it was reported.
        (Some(outcome), None) => {
            super::shown::report(cli.json, Some(outcome.clone()), io.out, io.err)
        }
        (_, prompt) => {
            // Carried on, not followed up: held to what is left of its budget,
            // the limits it was given unless the flags say otherwise.
            let carried = (lead.outcome.is_none() && lead.unfinished).then_some(spent);
            let mut cli = cli;
            if let (Some(_), Some(limits)) = (&carried, lead.limits) {
                // What the journal says is taken only where the flags would
                // have taken it (a positive amount).
                let cost = limits.max_cost_usd.filter(|c| c.is_finite() && *c > 0.0);
                cli.max_cost = cli.max_cost.or(cost);
                cli.max_tokens = cli.max_tokens.or(limits.max_tokens.filter(|t| *t > 0));
                let timeout = limits.timeout_ms.filter(|t| *t > 0);
                cli.timeout = cli
                    .timeout
                    .or(timeout.map(std::time::Duration::from_millis));
            }
            let lead = Lead::Resume {
                run: run.id,
                role: lead.role.clone(),
                prompt,
                carried,
            };
            run::drive(cli, lead, io).await
        }
    }
}

/// Splits `resume`'s words into a run prefix and a prompt: one word that cannot
/// be a prefix of an id is the prompt, for the latest run.
fn run_and_prompt(id: Option<String>, prompt: Option<String>) -> (Option<String>, Option<String>) {
    match (id, prompt) {
        (Some(word), None) if !looks_like_id(&word) => (None, Some(word)),
        (id, prompt) => (id, prompt.filter(|p| !p.trim().is_empty())),
    }
}

/// An id prefix is hex digits and dashes; ids begin with the time, so every prefix
/// has a digit, while words like "add" or "beef" have none.
fn looks_like_id(word: &str) -> bool {
    word.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
        && word.chars().any(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_word_is_a_run_when_it_can_be_an_id_and_a_prompt_otherwise() {
        let s = |v: &str| Some(v.to_owned());
        assert_eq!(run_and_prompt(s("01a2b3"), None), (s("01a2b3"), None));
        assert_eq!(run_and_prompt(s("add tests"), None), (None, s("add tests")));
        assert_eq!(run_and_prompt(s("beef"), None), (None, s("beef")));
        assert_eq!(run_and_prompt(s("01a2"), s("more")), (s("01a2"), s("more")));
        assert_eq!(run_and_prompt(None, None), (None, None));
    }
}
