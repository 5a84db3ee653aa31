//! `madeira crontab import` (placeholder).

use std::process::ExitCode;

use anyhow::{Result, bail};

use crate::cli::CrontabCommand;

pub fn run(_command: CrontabCommand) -> Result<ExitCode> {
    bail!("not yet")
}
