//! `orchestrate-sandbox`: the launcher of sandboxed Bash commands alone
//! (`orchestrate::tools::bash::launcher`), installed beside `orchestrate`. The
//! orchestrator starts each confined command through it when it is there (else
//! through itself): a binary this small starts several times faster, and its
//! start-up is most of what a sandboxed call costs beyond the shell's own. Run by
//! anything but the orchestrator, it does nothing.

use std::process::ExitCode;

use orchestrate::tools::bash::launcher;

fn main() -> ExitCode {
    match launcher::run_if_asked() {
        Some(launched) => launched.finish(&mut std::io::stdout(), &mut std::io::stderr()),
        None => {
            eprintln!(
                "orchestrate-sandbox: the launcher of orchestrate's sandboxed commands; orchestrate runs it, not a person"
            );
            ExitCode::from(2)
        }
    }
}
