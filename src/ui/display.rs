//! The CLI's progress display: the board fed with events and drawn as a live tree
//! (indicatif) on a terminal, or as one plain line per lifecycle event elsewhere,
//! plus role-file reports and the closing summary. What each row says is pure
//! rendering in [`super::progress`]; this owns when and where it is drawn, and that
//! every row and line is shown as a [`Shown::Line`] (a tool's arguments are the
//! model's text).

use std::io::Write;
use std::time::Duration;

use super::escape::{Shown, visible};
use super::progress;
use crate::protocol::Event;
use crate::roles::watch::Reload;

/// How progress is shown.
#[derive(Clone, Debug)]
pub enum Progress {
    /// A live tree, one bar per agent, drawn on this (stderr, a terminal); the
    /// permission prompt pauses it while it asks.
    Live(indicatif::MultiProgress),
    /// One plain line per lifecycle event on stderr.
    Plain,
    /// Nothing (`--json`, `--quiet`).
    Off,
}

/// The progress display of one run: the board and its rendering.
pub(crate) struct Display {
    mode: Progress,
    /// Role colors for the live tree; empty when colors are off (NO_COLOR).
    colors: std::collections::HashMap<String, String>,
    board: progress::Board,
    started: std::time::Instant,
    multi: indicatif::MultiProgress,
    bars: Vec<indicatif::ProgressBar>,
}

impl Display {
    pub(crate) fn new(mode: Progress, colors: std::collections::HashMap<String, String>) -> Self {
        let multi = match &mode {
            Progress::Live(multi) => multi.clone(),
            Progress::Plain | Progress::Off => {
                indicatif::MultiProgress::with_draw_target(indicatif::ProgressDrawTarget::hidden())
            }
        };
        Self {
            mode,
            colors,
            board: progress::Board::new(),
            started: std::time::Instant::now(),
            multi,
            bars: Vec::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub(crate) fn show(&mut self, event: &Event, err: &mut dyn Write) {
        if matches!(self.mode, Progress::Off) {
            return;
        }
        let Some(index) = self.board.apply(event, self.started.elapsed()) else {
            return;
        };
        let now = self.now_ms();
        match self.mode {
            Progress::Plain => {
                if let Some(line) = progress::plain_line(&self.board, index, event, now) {
                    let _ = writeln!(err, "{}", visible(&line, Shown::Line));
                }
            }
            Progress::Live(_) => {
                if index < self.bars.len() && event.kind.is_progress() {
                    // Text and reasoning deltas come often and change only their
                    // own row; lifecycle events can change others' (a parent's
                    // count of sub-agents), so they redraw the tree.
                    self.draw(index, now);
                    return;
                }
                while self.bars.len() <= index {
                    let bar = self.multi.add(indicatif::ProgressBar::new_spinner());
                    bar.enable_steady_tick(Duration::from_millis(120));
                    self.bars.push(bar);
                }
                self.refresh();
            }
            Progress::Off => {}
        }
    }

    /// Shows what a reload of the role files found, above the live tree or as
    /// plain lines (also under `--json` and `--quiet`: stdout stays clean).
    pub(crate) fn reloaded(&self, reload: &Reload, err: &mut dyn Write) {
        let lines = reload.problems.iter().chain(&reload.warnings);
        for line in lines.map(|l| format!("orchestrate: warning: {l}")) {
            let line = visible(&line, Shown::Line);
            match &self.mode {
                Progress::Live(multi) => {
                    let _ = multi.println(line);
                }
                Progress::Plain | Progress::Off => {
                    let _ = writeln!(err, "{line}");
                }
            }
        }
    }

    /// Redraws every row (elapsed times and countdowns move on their own).
    pub(crate) fn refresh(&self) {
        let now = self.now_ms();
        for i in 0..self.bars.len() {
            self.draw(i, now);
        }
    }

    /// Redraws row `i` as of `now`.
    fn draw(&self, i: usize, now: u64) {
        // Rows are drawn on the terminal directly, not through the CLI's writers.
        let mut row = visible(&progress::render_row(&self.board, i, now), Shown::Line).into_owned();
        if let Some(color) = self.colors.get(&self.board.rows()[i].role) {
            row = progress::paint(&row, color);
        }
        if self.board.rows()[i].ended_ms.is_some() {
            self.bars[i].finish_with_message(row);
        } else {
            self.bars[i].set_message(row);
        }
    }

    /// Leaves the final tree, then the summary table when there were sub-agents.
    pub(crate) fn finish(&self, err: &mut dyn Write) {
        if matches!(self.mode, Progress::Off) {
            return;
        }
        self.refresh();
        for bar in &self.bars {
            bar.finish();
        }
        // On a terminal the finished live tree stays on screen: the table would
        // only repeat it.
        if self.board.rows().len() > 1 && matches!(self.mode, Progress::Plain) {
            let _ = write!(err, "\n{}", progress::summary(&self.board, self.now_ms()));
        }
        let files = progress::files_changed(&self.board);
        if !files.is_empty() {
            let _ = write!(err, "\n{files}");
        }
    }
}
