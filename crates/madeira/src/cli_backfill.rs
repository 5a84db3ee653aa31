//! The arguments of `madeira backfill FLOW …` and `madeira backfills …` (the
//! commands are `crate::commands::backfill`).

use clap::{Args, Subcommand};

use crate::server_args::ServerArgs;

/// `--reason`: refused blank before anything is sent.
fn non_blank(s: &str) -> Result<String, String> {
    match s.trim() {
        "" => Err("the reason is blank: say why (it is kept in the audit trail)".into()),
        reason => Ok(reason.to_string()),
    }
}

/// A date, refused unless YYYY-MM-DD before anything is sent.
fn date(s: &str) -> Result<String, String> {
    madeira_core::bizdate::parse_date(s.trim()).map(madeira_core::bizdate::format_date)
}

#[derive(Debug, Args)]
pub struct BackfillArgs {
    /// The flow to backfill.
    pub flow: String,
    /// First business date (YYYY-MM-DD).
    #[arg(long, value_parser = date, required_unless_present = "dates", requires = "to")]
    pub from: Option<String>,
    /// Last business date (YYYY-MM-DD), included.
    #[arg(long, value_parser = date, requires = "from")]
    pub to: Option<String>,
    /// Exact dates instead of a range, comma-separated.
    #[arg(long, value_delimiter = ',', value_parser = date, conflicts_with_all = ["from", "to"])]
    pub dates: Option<Vec<String>>,
    /// Only business days of this calendar between --from and --to.
    #[arg(long)]
    pub calendar: Option<String>,
    /// The order dates are taken in: asc or desc.
    #[arg(long, default_value = "asc", value_parser = ["asc", "desc"])]
    pub order: String,
    /// Runs of the backfill at once (1 to 64).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub parallel: u32,
    /// Also every flow downstream of FLOW in the estate, for the same dates.
    #[arg(long)]
    pub with_dependents: bool,
    /// A date with a SUCCESS run is skipped (skip-existing) or run again (existing).
    #[arg(long, default_value = "skip-existing", value_parser = ["existing", "skip-existing"])]
    pub rerun: String,
    /// Why (required, not blank): kept in the audit trail.
    #[arg(long, value_parser = non_blank)]
    pub reason: String,
    /// Wait until the backfill is done (exit 1 when a run failed or was blocked).
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(Debug, Subcommand)]
pub enum BackfillsCommand {
    /// One backfill with each (flow, date) and its run.
    Show {
        id: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Stop creating its runs (runs already made go on).
    Pause(ChangeArgs),
    /// Create its runs again.
    Resume(ChangeArgs),
    /// Cancel it and its runs not finished yet.
    Cancel(ChangeArgs),
}

#[derive(Debug, Args)]
pub struct ChangeArgs {
    pub id: String,
    /// Why (required, not blank): kept in the audit trail.
    #[arg(long, value_parser = non_blank)]
    pub reason: String,
    #[command(flatten)]
    pub server: ServerArgs,
}
