//! What one simple command runs: its own program, and every program it hands
//! its arguments to (`xargs`, `timeout`, `nice`, `env`, `sh -c`, `eval`,
//! `find -exec`, …), each as the words a rule is matched against. A shell
//! keyword before the command (`then rm`, `do rm`) is looked past; `find
//! -delete` counts as `rm`. `None` when what runs cannot be told from the
//! words: a `git` given `-c` options or a command of its own (an alias may run
//! anything), or commands nested past a depth.

/// How deep `sh -c 'eval "xargs …"'` and the like are followed.
const MAX_DEPTH: usize = 8;

/// A word of a command as the shell reads it: quotes and backslashes taken
/// out; not `literal` when an unquoted or double-quoted `$`, or a glob, stays
/// in it (the shell would replace it with words nobody can tell from here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Word {
    pub(super) text: String,
    pub(super) literal: bool,
}

/// One program a command runs: its name (without its folder) and arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Program(pub(super) Vec<Word>);

impl Program {
    /// The words as text, one space between them.
    pub(super) fn text(&self) -> String {
        let words: Vec<&str> = self.0.iter().map(|w| w.text.as_str()).collect();
        words.join(" ")
    }

    /// How many words, from the first, the shell runs as written.
    pub(super) fn literal_words(&self) -> usize {
        self.0.iter().take_while(|w| w.literal).count()
    }
}

mod options;

use self::options::{Parsed, Spec, parse};

/// Words that open or close a shell construct before a command.
const KEYWORDS: [&str; 10] = [
    "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!",
];

/// Constructs whose words are not a command to run (`for f in a b`).
const NOT_COMMANDS: [&str; 4] = ["for", "select", "case", "function"];

/// Programs and builtins whose effect on what runs cannot be told from their
/// words: they run a command line kept elsewhere (`trap`, `alias`, a sourced
/// file, `mapfile -C`), set variables a later program obeys (`export
/// BASH_ENV=…`, `declare -x GIT_EXTERNAL_DIFF=…`, `hash -p`), or take options
/// too many to vouch for (`unshare`, `parallel`).
const UNREADABLE: [&str; 31] = [
    "trap",
    "alias",
    "source",
    ".",
    "mapfile",
    "readarray",
    "coproc",
    "export",
    "declare",
    "typeset",
    "readonly",
    "local",
    "enable",
    "hash",
    "fc",
    "su",
    "runuser",
    "pkexec",
    "sg",
    "newgrp",
    "nsenter",
    "unshare",
    "setpriv",
    "chrt",
    "taskset",
    "bwrap",
    "firejail",
    "systemd-run",
    "script",
    "parallel",
    "expect",
];

/// Shells: given `-c`, the line after it is looked into; otherwise they run a
/// script or their input, which no rule can read.
const SHELLS: [&str; 15] = [
    "sh", "bash", "rbash", "zsh", "dash", "ksh", "ksh93", "mksh", "pdksh", "ash", "yash", "fish",
    "csh", "tcsh", "posh",
];

/// A shell's options: `-c` and every flag a shell of the list takes.
const SHELL: Spec = Spec {
    flags: "abcefhiklmnprstuvxBCEHPTDNIq",
    valued: "oO",
    optional: "",
    long_flags: &[
        "norc",
        "noprofile",
        "login",
        "posix",
        "restricted",
        "verbose",
        "noediting",
        "debugger",
        "help",
        "version",
        "dump-strings",
        "dump-po-strings",
        "pretty-print",
        "interactive",
        "no-config",
        "private",
        "no-execute",
    ],
    long_valued: &["rcfile", "init-file", "command", "init-command"],
    long_optional: &[],
    numbers: false,
    plus: true,
};

/// Interpreters given code on the command line (`python -c`, `perl -e`,
/// `node --eval`): the code may run anything. A script file they run is a
/// program like any other.
fn inline_code(name: &str, args: &[Word]) -> bool {
    let family = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    let (short, long): (&str, &[&str]) = match family {
        "python" | "pypy" => ("c", &[]),
        "perl" => ("eE", &[]),
        "ruby" | "lua" | "luajit" | "Rscript" | "tclsh" | "osascript" => ("e", &[]),
        "node" | "nodejs" | "bun" => ("ep", &["--eval", "--print"]),
        "deno" => ("", &["eval"]),
        "php" => ("rBRFE", &[]),
        "pwsh" | "powershell" => ("c", &["-Command", "-EncodedCommand"]),
        _ => return false,
    };
    args.iter().any(|w| {
        let t = w.text.as_str();
        long.iter()
            .any(|l| t == *l || t.starts_with(&format!("{l}=")))
            || (t.starts_with('-')
                && !t.starts_with("--")
                && t[1..].chars().any(|c| short.contains(c)))
    })
}

/// An awk program that runs a command (`system()`, a pipe to or from one) or
/// comes from a file.
fn awk_runs(args: &[Word]) -> bool {
    let mut i = 0;
    while let Some(word) = args.get(i) {
        let text = word.text.as_str();
        match text {
            "-f" | "--file" => return true,
            "-v" | "-F" | "--assign" | "--field-separator" => i += 2,
            t if t.starts_with("-f") || t.starts_with("--file=") => return true,
            "--" => {
                i += 1;
                break;
            }
            t if t.starts_with('-') && t != "-" => i += 1,
            _ => break,
        }
    }
    args.get(i).is_none_or(|program| {
        !program.literal
            || program.text.contains("system")
            || program.text.contains('|')
            || program.text.contains("getline")
    })
}

/// The programs `part` (one simple command, as `commands` cuts a line) runs;
/// `None` when that cannot be told.
pub(super) fn programs(part: &str) -> Option<Vec<Program>> {
    let mut found = Vec::new();
    run(&words(part), 0, false, &mut found)?;
    Some(found)
}

/// The programs of a whole line (`sh -c LINE`, `eval …`), `depth` levels in.
fn line(text: &str, depth: usize, found: &mut Vec<Program>) -> Option<()> {
    for part in super::commands(text)? {
        run(&words(&part), depth, false, found)?;
    }
    Some(())
}

/// Adds the programs that `words` (one command) runs to `found`. `appended`:
/// more words may follow the last (`xargs` appends its input), so a wrapper
/// given no command may yet be given one.
fn run(words: &[Word], depth: usize, appended: bool, found: &mut Vec<Program>) -> Option<()> {
    if depth > MAX_DEPTH {
        return None;
    }
    let start = words
        .iter()
        .position(|w| !(w.literal && KEYWORDS.contains(&w.text.as_str())))
        .unwrap_or(words.len());
    let words = &words[start..];
    let Some(first) = words.first() else {
        return Some(());
    };
    if first.literal && NOT_COMMANDS.contains(&first.text.as_str()) {
        return Some(());
    }
    let name = first.text.rsplit('/').next().unwrap_or_default().to_owned();
    let mut program = vec![Word {
        text: name.clone(),
        literal: first.literal,
    }];
    program.extend(words[1..].iter().cloned());
    found.push(Program(program));
    if !first.literal {
        return Some(());
    }
    let args = &words[1..];
    let name = name.as_str();
    if UNREADABLE.contains(&name) || inline_code(name, args) {
        return None;
    }
    if matches!(name, "awk" | "gawk" | "mawk" | "nawk") && awk_runs(args) {
        return None;
    }
    // The command a wrapper runs, after its options (and `skip` operands more).
    let wrapped = |spec: &Spec, skip: usize, found: &mut Vec<Program>| -> Option<()> {
        let parsed = parse(args, spec)?;
        command(args, &parsed, skip, depth, appended, found)
    };
    match name {
        "nohup" | "builtin" => wrapped(&NONE, 0, found),
        "setsid" => wrapped(&SETSID, 0, found),
        "command" => wrapped(&COMMAND, 0, found),
        "exec" => wrapped(&EXEC, 0, found),
        "sudo" => wrapped(&SUDO, 0, found),
        "doas" => wrapped(&DOAS, 0, found),
        "nice" => wrapped(&NICE, 0, found),
        "ionice" => wrapped(&IONICE, 0, found),
        "stdbuf" => wrapped(&STDBUF, 0, found),
        "chroot" => wrapped(&CHROOT, 1, found),
        "timeout" => wrapped(&TIMEOUT, 1, found),
        "time" => wrapped(&TIME, 0, found),
        "busybox" => run(args, depth + 1, appended, found),
        "env" => env(args, depth, appended, found),
        "flock" => flock(args, depth, appended, found),
        "xargs" => {
            let parsed = parse(args, &XARGS)?;
            match args.get(parsed.at) {
                Some(_) => run(&args[parsed.at..], depth + 1, true, found),
                // `echo` is what it runs with no command.
                None => Some(()),
            }
        }
        shell if SHELLS.contains(&shell) => {
            let parsed = parse(args, &SHELL)?;
            let given = parsed.flags.contains('c') || parsed.value("", "command").is_some();
            match (given, args.get(parsed.at), parsed.value("", "command")) {
                (_, _, Some(text)) => line(text, depth + 1, found),
                (true, Some(text), None) if text.literal => line(&text.text, depth + 1, found),
                _ => None,
            }
        }
        "eval" => joined(args, depth + 1, found),
        "watch" => {
            let parsed = parse(args, &WATCH)?;
            joined(&args[parsed.at..], depth + 1, found)
        }
        "find" => find(args, depth + 1, found),
        "git" => git(args, depth + 1, found),
        _ => Some(()),
    }
}

/// The command after a wrapper's options and `skip` operands (a `timeout`'s
/// duration, a `chroot`'s folder). A wrapper with no command runs nothing,
/// unless more words may come (`xargs nice`): then it is unreadable.
fn command(
    args: &[Word],
    parsed: &Parsed,
    skip: usize,
    depth: usize,
    appended: bool,
    found: &mut Vec<Program>,
) -> Option<()> {
    match args.get(parsed.at + skip..).filter(|rest| !rest.is_empty()) {
        Some(rest) => run(rest, depth + 1, appended, found),
        None if appended => None,
        None => Some(()),
    }
}

const SETSID: Spec = Spec {
    flags: "cfw",
    long_flags: &["ctty", "fork", "wait"],
    ..NONE
};
const COMMAND: Spec = Spec {
    flags: "pvV",
    ..NONE
};
const EXEC: Spec = Spec {
    flags: "cl",
    valued: "a",
    ..NONE
};
const SUDO: Spec = Spec {
    flags: "AbEHiKklnPSsVv",
    valued: "CDghprtTUu",
    long_flags: &[
        "askpass",
        "background",
        "bell",
        "set-home",
        "login",
        "remove-timestamp",
        "reset-timestamp",
        "non-interactive",
        "preserve-groups",
        "stdin",
        "shell",
        "validate",
    ],
    long_valued: &[
        "close-from",
        "chdir",
        "group",
        "host",
        "prompt",
        "role",
        "type",
        "command-timeout",
        "other-user",
        "user",
    ],
    long_optional: &["preserve-env"],
    ..NONE
};
const DOAS: Spec = Spec {
    flags: "ns",
    valued: "aCu",
    ..NONE
};
const NICE: Spec = Spec {
    valued: "n",
    long_valued: &["adjustment"],
    numbers: true,
    ..NONE
};
const IONICE: Spec = Spec {
    flags: "t",
    valued: "cnpPu",
    long_flags: &["ignore"],
    long_valued: &["class", "classdata", "pid", "pgid", "uid"],
    ..NONE
};
const STDBUF: Spec = Spec {
    valued: "ioe",
    long_valued: &["input", "output", "error"],
    ..NONE
};
const CHROOT: Spec = Spec {
    long_flags: &["skip-chdir"],
    long_valued: &["userspec", "groups"],
    ..NONE
};
const TIMEOUT: Spec = Spec {
    flags: "fpv",
    valued: "sk",
    long_flags: &["preserve-status", "foreground", "verbose"],
    long_valued: &["signal", "kill-after"],
    ..NONE
};
/// The shell's `time` keyword and GNU `time`.
const TIME: Spec = Spec {
    flags: "apqv",
    valued: "fo",
    long_flags: &["append", "portability", "quiet", "verbose"],
    long_valued: &["format", "output"],
    ..NONE
};
const XARGS: Spec = Spec {
    flags: "0oprtx",
    valued: "adEILnPs",
    optional: "eil",
    long_flags: &[
        "null",
        "interactive",
        "no-run-if-empty",
        "verbose",
        "exit",
        "show-limits",
        "open-tty",
    ],
    long_valued: &[
        "arg-file",
        "delimiter",
        "max-args",
        "max-procs",
        "max-chars",
        "process-slot-var",
    ],
    long_optional: &["eof", "replace", "max-lines"],
    ..NONE
};
const WATCH: Spec = Spec {
    flags: "bcCegprtwx",
    valued: "nq",
    optional: "d",
    long_flags: &[
        "beep", "color", "no-color", "errexit", "chgexit", "precise", "no-rerun", "no-title",
        "no-wrap", "exec",
    ],
    long_valued: &["interval", "equexit"],
    long_optional: &["differences"],
    ..NONE
};
const ENV: Spec = Spec {
    flags: "i0v",
    valued: "uCS",
    long_flags: &[
        "ignore-environment",
        "null",
        "debug",
        "list-signal-handling",
    ],
    long_valued: &["unset", "chdir", "split-string"],
    long_optional: &["block-signal", "default-signal", "ignore-signal"],
    ..NONE
};
const FLOCK: Spec = Spec {
    flags: "sxunoFv",
    valued: "Ewc",
    long_flags: &[
        "shared",
        "exclusive",
        "unlock",
        "nonblock",
        "nb",
        "close",
        "no-fork",
        "verbose",
    ],
    long_valued: &["timeout", "wait", "conflict-exit-code", "command"],
    ..NONE
};
const NONE: Spec = Spec {
    flags: "",
    valued: "",
    optional: "",
    long_flags: &[],
    long_valued: &[],
    long_optional: &[],
    numbers: false,
    plus: false,
};

/// `env [OPTIONS] [NAME=VALUE…] [COMMAND]`: `-S STRING` is a command line; a
/// variable set is unreadable, as it is before a command (`BASH_ENV`,
/// `GIT_EXTERNAL_DIFF` and the like make a later program run another).
fn env(args: &[Word], depth: usize, appended: bool, found: &mut Vec<Program>) -> Option<()> {
    let parsed = parse(args, &ENV)?;
    if let Some(split) = parsed.value("S", "split-string") {
        let mut text = split.to_owned();
        for word in &args[parsed.at..] {
            if !word.literal {
                return None;
            }
            text.push(' ');
            text.push_str(&word.text);
        }
        return line(&text, depth + 1, found);
    }
    if args[parsed.at..].iter().any(|w| is_assignment(&w.text)) {
        return None;
    }
    command(args, &parsed, 0, depth, appended, found)
}

/// `flock [OPTIONS] FILE COMMAND…`, `flock [OPTIONS] FILE -c LINE` and `flock
/// [OPTIONS] FD` (which runs nothing).
fn flock(args: &[Word], depth: usize, appended: bool, found: &mut Vec<Program>) -> Option<()> {
    let parsed = parse(args, &FLOCK)?;
    if let Some(text) = parsed.value("c", "command") {
        return line(text, depth + 1, found);
    }
    let rest = args.get(parsed.at + 1..).unwrap_or_default();
    match rest.first().map(|w| w.text.as_str()) {
        Some("-c" | "--command") => match rest.get(1) {
            Some(text) if text.literal => line(&text.text, depth + 1, found),
            _ => None,
        },
        _ => command(args, &parsed, 1, depth, appended, found),
    }
}

/// Words joined into one command line, as `eval` and `watch` run them.
fn joined(words: &[Word], depth: usize, found: &mut Vec<Program>) -> Option<()> {
    if words.iter().any(|w| !w.literal) {
        return None;
    }
    let text: Vec<&str> = words.iter().map(|w| w.text.as_str()).collect();
    line(&text.join(" "), depth, found)
}

/// `find`'s actions: each `-exec`, `-execdir`, `-ok`, `-okdir` command (up to
/// its `;` or `+`), and `-delete`, which is `rm`.
fn find(args: &[Word], depth: usize, found: &mut Vec<Program>) -> Option<()> {
    let mut i = 0;
    while let Some(word) = args.get(i) {
        i += 1;
        match word.text.as_str() {
            "-exec" | "-execdir" | "-ok" | "-okdir" => {
                let end = args[i..]
                    .iter()
                    .position(|w| w.text == ";" || w.text == "+")
                    .map_or(args.len(), |n| i + n);
                run(&args[i..end], depth, false, found)?;
                i = end + 1;
            }
            "-delete" => found.push(Program(vec![Word {
                text: "rm".into(),
                literal: true,
            }])),
            _ => {}
        }
    }
    Some(())
}

/// The commands of git's own that cannot be an alias (git ignores an alias of
/// a command it has) and run no program a rule would not see.
const GIT_COMMANDS: [&str; 46] = [
    "add",
    "am",
    "apply",
    "archive",
    "bisect",
    "blame",
    "branch",
    "bundle",
    "cat-file",
    "checkout",
    "cherry-pick",
    "clean",
    "clone",
    "commit",
    "config",
    "describe",
    "diff",
    "fetch",
    "format-patch",
    "gc",
    "grep",
    "init",
    "log",
    "ls-files",
    "ls-remote",
    "merge",
    "mv",
    "notes",
    "pull",
    "push",
    "rebase",
    "reflog",
    "remote",
    "reset",
    "restore",
    "rev-list",
    "rev-parse",
    "revert",
    "rm",
    "shortlog",
    "show",
    "stash",
    "status",
    "submodule",
    "switch",
    "tag",
];

/// git's own options before its command (`-c` and `--config-env`, config that
/// may name a program, and `--exec-path`, where its commands are found, are not
/// among them: unreadable).
const GIT: Spec = Spec {
    flags: "pP",
    valued: "C",
    long_flags: &[
        "paginate",
        "no-pager",
        "bare",
        "no-replace-objects",
        "literal-pathspecs",
        "glob-pathspecs",
        "noglob-pathspecs",
        "icase-pathspecs",
        "no-optional-locks",
        "no-advice",
        "version",
        "help",
        "html-path",
        "man-path",
        "info-path",
        "no-lazy-fetch",
    ],
    long_valued: &[
        "git-dir",
        "work-tree",
        "namespace",
        "list-cmds",
        "attr-source",
    ],
    ..NONE
};

/// `git submodule foreach`'s options.
const FOREACH: Spec = Spec {
    flags: "q",
    long_flags: &["quiet", "recursive"],
    ..NONE
};

/// Options of git commands that name a program to run on the other side of a
/// transfer or as a pager: unreadable.
const GIT_PROGRAM_OPTIONS: [&str; 4] = [
    "--upload-pack",
    "--receive-pack",
    "--exec",
    "--open-files-in-pager",
];

/// `git`: what it runs besides itself. An option that names a program (config,
/// `--exec-path`, `--upload-pack`, `grep -O`, `clone -u`), a command git does
/// not have (an alias), or a command name the shell expands make it
/// unreadable; `submodule foreach`, `bisect run` and `rebase --exec` add their
/// commands.
fn git(args: &[Word], depth: usize, found: &mut Vec<Program>) -> Option<()> {
    let parsed = parse(args, &GIT)?;
    let i = parsed.at;
    let Some(command) = args.get(i) else {
        return Some(());
    };
    if !command.literal || !GIT_COMMANDS.contains(&command.text.as_str()) {
        return None;
    }
    let rest = args.get(i + 1..).unwrap_or_default();
    let names_a_program = rest.iter().any(|w| {
        let t = w.text.as_str();
        GIT_PROGRAM_OPTIONS
            .iter()
            .any(|o| t == *o || t.strip_prefix(o).is_some_and(|v| v.starts_with('=')))
            || (command.text == "grep" && t.starts_with("-O"))
            || (command.text == "clone" && t.starts_with("-u"))
    });
    match command.text.as_str() {
        "submodule" if rest.first().is_some_and(|w| w.text == "foreach") => {
            let parsed = parse(&rest[1..], &FOREACH)?;
            joined(rest.get(1 + parsed.at..).unwrap_or_default(), depth, found)
        }
        "bisect" if rest.first().is_some_and(|w| w.text == "run") => {
            run(rest.get(1..).unwrap_or_default(), depth, false, found)
        }
        "rebase" => {
            for (at, word) in rest.iter().enumerate() {
                if word.text == "-x" || word.text == "--exec" {
                    joined(rest.get(at + 1..at + 2).unwrap_or_default(), depth, found)?;
                } else if let Some(exec) = word.text.strip_prefix("--exec=") {
                    line(exec, depth, found)?;
                }
            }
            Some(())
        }
        _ if names_a_program => None,
        _ => Some(()),
    }
}

/// `NAME=VALUE`.
fn is_assignment(text: &str) -> bool {
    text.split_once('=')
        .is_some_and(|(name, _)| super::valid_name(name) && !name.starts_with('-'))
}

/// The words of one simple command (its quotes closed: `commands` checked).
pub(super) fn words(part: &str) -> Vec<Word> {
    /// One word as it is read.
    #[derive(Default)]
    struct Reading {
        text: String,
        started: bool,
        /// An unquoted or double-quoted `$` or backtick.
        expands: bool,
        /// An unquoted `*`, `?`, or `[` then `]`: a glob.
        star: bool,
        bracket: bool,
    }
    let mut words = Vec::new();
    let mut word = Reading::default();
    let mut chars = part.chars();
    let mut finish = |word: &mut Reading| {
        let done = std::mem::take(word);
        if done.started {
            words.push(Word {
                text: done.text,
                literal: !done.expands && !done.star,
            });
        }
    };
    while let Some(c) = chars.next() {
        if c.is_whitespace() {
            finish(&mut word);
            continue;
        }
        word.started = true;
        match c {
            '\'' => word.text.extend(chars.by_ref().take_while(|q| *q != '\'')),
            '"' => {
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => word.text.extend(chars.next()),
                        '$' | '`' => {
                            word.expands = true;
                            word.text.push(q);
                        }
                        q => word.text.push(q),
                    }
                }
            }
            '\\' => word.text.extend(chars.next()),
            '$' | '`' => {
                word.expands = true;
                word.text.push(c);
            }
            '*' | '?' => {
                word.star = true;
                word.text.push(c);
            }
            '[' => {
                word.bracket = true;
                word.text.push(c);
            }
            ']' => {
                // `[…]` with something in it; a lone `[` is the test command.
                word.star |= word.bracket && !word.text.ends_with('[');
                word.text.push(c);
            }
            c => word.text.push(c),
        }
    }
    finish(&mut word);
    words
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(part: &str) -> Option<Vec<String>> {
        programs(part).map(|found| found.iter().map(Program::text).collect())
    }

    #[test]
    fn wrappers_are_looked_into_and_find_delete_is_rm() {
        let cases: [(&str, &[&str]); 12] = [
            ("rm -rf x", &["rm -rf x"]),
            ("then rm x", &["rm x"]),
            ("do /bin/rm x", &["rm x"]),
            ("xargs -n 1 rm", &["xargs -n 1 rm", "rm"]),
            (
                "timeout -s KILL 5 rm x",
                &["timeout -s KILL 5 rm x", "rm x"],
            ),
            (
                "nice -n 5 nohup rm x",
                &["nice -n 5 nohup rm x", "nohup rm x", "rm x"],
            ),
            ("env -i -u A rm x", &["env -i -u A rm x", "rm x"]),
            (
                "bash -c 'cd x && rm y'",
                &["bash -c cd x && rm y", "cd x", "rm y"],
            ),
            ("eval rm x", &["eval rm x", "rm x"]),
            (
                "find . -name '*.o' -exec rm {} ;",
                &["find . -name *.o -exec rm {} ;", "rm {}"],
            ),
            ("find . -delete", &["find . -delete", "rm"]),
            ("stdbuf -oL rm x", &["stdbuf -oL rm x", "rm x"]),
        ];
        for (part, expected) in cases {
            assert_eq!(texts(part).unwrap(), expected, "{part}");
        }
    }

    #[test]
    fn a_name_the_shell_expands_is_not_literal_and_git_that_may_run_anything_is_unreadable() {
        let found = programs("$@ x").unwrap();
        assert_eq!(found[0].literal_words(), 0);
        let found = programs("/bin/r? x").unwrap();
        assert_eq!(found[0].literal_words(), 0);
        let found = programs("[ -f x ]").unwrap();
        assert_eq!(found[0].literal_words(), 4, "a lone [ is the test command");
        let found = programs("rm '*.o' \"$f\"").unwrap();
        assert_eq!(found[0].literal_words(), 2, "a quoted glob is literal");
        let found = programs("rm x[ab]").unwrap();
        assert_eq!(found[0].literal_words(), 1);
        for part in [
            "git -c core.pager=rm log",
            "git frobnicate",
            "git $CMD",
            "bash -c \"$X\"",
            "eval \"$X\"",
        ] {
            assert_eq!(texts(part), None, "{part}");
        }
        assert_eq!(texts("git -C sub status").unwrap(), ["git -C sub status"]);
        assert_eq!(
            texts("git submodule foreach 'rm -rf x'").unwrap(),
            ["git submodule foreach rm -rf x", "rm -rf x"]
        );
        assert_eq!(texts("for f in a b").unwrap(), Vec::<String>::new());
    }
}
