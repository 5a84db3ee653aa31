//! Command-line definitions (SPEC §9a).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use crate::cli_backfill::{BackfillArgs, BackfillsCommand};
pub use crate::server_args::{Output, ServerArgs};

#[derive(Debug, Parser)]
#[command(
    name = "madeira",
    version,
    about = "Workflow governance: DAGs, retries, throttling, confirmations, alerts"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub struct Global {
    /// Log filter when RUST_LOG is not set.
    #[arg(long, global = true, default_value = "warn")]
    pub log_level: String,
    /// Log lines on stderr as human text or JSON (with trace ids).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Export run and attempt spans over OTLP/gRPC to this endpoint.
    #[arg(long, global = true, env = "OTEL_EXPORTER_OTLP_ENDPOINT", hide_env_values = true)]
    pub otlp_endpoint: Option<String>,
    /// `service.name` of exported spans.
    #[arg(long, global = true, env = "OTEL_SERVICE_NAME", hide_env_values = true, default_value = "madeira")]
    pub otel_service_name: String,
}

impl Global {
    /// Telemetry settings of servers started by this command.
    pub fn telemetry(
        &self,
        log_control: madeira_telemetry::LogControl,
    ) -> madeira_telemetry::TelemetryOptions {
        let traces = self.otlp_endpoint.as_deref().map(str::trim).filter(|e| !e.is_empty()).map(|endpoint| {
            madeira_telemetry::TraceOptions {
                service_name: self.otel_service_name.clone(),
                ..madeira_telemetry::TraceOptions::new(endpoint)
            }
        });
        madeira_telemetry::TelemetryOptions { traces, log_control: Some(log_control), ..Default::default() }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TelemetryMode {
    On,
    Off,
    Both,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Control plane + embedded SQLite, no auth, loopback only.
    Dev(DevArgs),
    /// Production control plane.
    Serve {
        /// Server config file: listen addresses, store, tokens, alerts (see README).
        #[arg(long)]
        config: PathBuf,
    },
    /// Run the daily-settlement example end to end and exit (`--keep`: keep
    /// serving the console afterwards).
    Demo(DemoArgs),
    /// Measure the engine on an embedded durable SQLite store.
    Bench(BenchArgs),
    /// Check flow files offline.
    Validate {
        /// Flow files (*.yaml); every one is checked, errors as FILE:LINE.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Server config: SQL nodes must name one of its `datasources:`.
        #[arg(long)]
        config: Option<PathBuf>,
        /// `text` for people, `json` (one document on stdout) for scripts.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
    /// Cron helpers.
    Cron {
        #[command(subcommand)]
        command: CronCommand,
    },
    /// Store flow files on the control plane (a new version when content changed).
    /// Every file is validated first; one invalid file and nothing is applied.
    Apply {
        /// A flow file, a calendar file (top-level `calendar: NAME`, applied first), or a
        /// directory: its *.yaml and *.yml files (repeatable).
        #[arg(short = 'f', long = "file", required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Stop a flow's triggers until resumed: cron ticks wait for the misfire
    /// policy; events are kept (unless the trigger says `on_paused: drop`).
    Pause {
        flow: String,
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Resume a paused flow: events kept while paused start (oldest first); missed
    /// ticks follow its misfire policy.
    Resume {
        flow: String,
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// List flows, a flow's version history, or delete a flow.
    Flows {
        #[command(subcommand)]
        command: Option<FlowsCommand>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Govern an observe flow: Madeira runs it, its crontab line becomes a comment.
    ///
    /// SPEC §11: the flow gets its crontab line's schedule as a cron trigger and
    /// runs on dispatch through the sidecar job `crontab import` declared; prints
    /// the crontab with that line commented out (`--write`: edits the file, keeping
    /// FILE.bak). A flow `import xxl-job` wrote takes `--xxl-db` instead: its job is
    /// stopped in XXL-JOB's database first. Needs an admin token; audited.
    Promote(PromoteArgs),
    /// Undo `promote`: the flow is observe-only again, its crontab line restored.
    ///
    /// The flow gets a new version with `observe: true` (its cron trigger stays,
    /// for missed-run detection) and the commented line comes back (printed, or
    /// with `--write` written, keeping FILE.bak); with `--xxl-db`, its XXL-JOB job
    /// is started again. Needs an admin token; audited.
    Demote(PromoteArgs),
    /// Trigger a run.
    Run(RunArgs),
    /// List runs, newest first.
    Runs {
        /// Only this flow.
        #[arg(long)]
        flow: Option<String>,
        /// Only runs in this state (QUEUED, RUNNING, SUCCESS, FAILED, CANCELLED).
        #[arg(long)]
        status: Option<String>,
        /// Only runs this actor started: a token's name, `scheduler` (cron), `message:<source>`, …
        #[arg(long)]
        actor: Option<String>,
        /// Only runs of this business date (YYYY-MM-DD).
        #[arg(long, value_parser = biz_date_arg)]
        biz_date: Option<String>,
        /// At most this many, newest first.
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// Only runs created at or after: RFC 3339, YYYY-MM-DD or YYYY-MM-DDTHH:MM (UTC).
        #[arg(long)]
        since: Option<String>,
        /// Only runs created before (same forms as --since).
        #[arg(long)]
        until: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Show one run with its nodes.
    Show {
        run_id: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Confirm a node waiting in MANUAL_CONFIRM: it becomes SUCCESS and its downstream runs.
    Confirm(NodeActionArgs),
    /// Reject a node waiting in MANUAL_CONFIRM: it becomes FAILED.
    Reject(NodeActionArgs),
    /// Run a SUCCESS, FAILED or SKIPPED node again (`--downstream`: and the nodes after it).
    Rerun(NodeActionArgs),
    /// Mark a FAILED node SUCCESS by hand (its downstream then runs).
    MarkSuccess(NodeActionArgs),
    /// Skip a node that waits (INIT, RETRYING, MANUAL_CONFIRM) or FAILED.
    Skip(NodeActionArgs),
    /// Cancel a run.
    Cancel {
        run_id: String,
        /// Why (required, not blank): kept in the audit trail.
        #[arg(long, value_parser = non_blank_reason)]
        reason: String,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Print a node's logs (the last 64 KiB per attempt, and a running attempt's
    /// output so far); with `-f`, print its output as the job writes it until the
    /// attempt ends.
    Logs {
        run_id: String,
        node: String,
        /// Follow the running (or next) attempt's output until it ends.
        #[arg(short = 'f', long)]
        follow: bool,
        /// The attempt to show or follow (default: all stored / the latest).
        #[arg(long)]
        attempt: Option<u32>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Alerts (firing, resolved) with each delivery's status; `alerts test CHANNEL`
    /// sends a test message.
    Alerts(AlertsArgs),
    /// Run the sidecar daemon: the jobs declared in its config, on dispatch.
    Sidecar {
        /// Sidecar config file: control plane address, group token, declared jobs.
        #[arg(long)]
        config: PathBuf,
    },
    /// Run a command exactly as given and report it through the local sidecar.
    Exec(ExecArgs),
    /// Import jobs from other schedulers as flows (`xxl-job`).
    Import {
        #[command(subcommand)]
        command: ImportCommand,
    },
    /// Crontab helpers.
    Crontab {
        #[command(subcommand)]
        command: CrontabCommand,
    },
    /// The sidecar fleet: name, group, version, jobs, attempts running, heartbeat age.
    Sidecars {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Business-day calendars: every one with its data range, or `show NAME --year`.
    Calendars {
        #[command(subcommand)]
        command: Option<CalendarsCommand>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// The SQL datasources: kind, pool size, statements running, waiting (no URLs).
    Datasources {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Message sources (SPEC §6.1): state, lag and last error of each consumer.
    Sources {
        #[command(flatten)]
        server: ServerArgs,
    },
    /// The estate for a business date: every flow as a tree under its upstreams,
    /// with its state (done, running, held and by whom, failed, none).
    Estate {
        /// The business date, YYYY-MM-DD (default: today, UTC).
        #[arg(long)]
        date: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Backfill a flow over business dates (with its dependents), a few runs at once.
    Backfill(BackfillArgs),
    /// The backfills with their progress; show, pause, resume or cancel one.
    Backfills {
        #[command(subcommand)]
        command: Option<BackfillsCommand>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// The audit log of operator actions.
    Audit {
        /// Only actions on this run.
        #[arg(long)]
        run: Option<String>,
        /// Only actions by this actor (a token name, `local` in dev).
        #[arg(long)]
        actor: Option<String>,
        /// At most this many, newest first.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[command(flatten)]
        server: ServerArgs,
    },
}

impl Command {
    /// Commands that only print (the client commands, validate, cron, crontab):
    /// a closed pipe (`madeira sidecars | head`) ends them quietly, as it ends
    /// `ls`. Servers, the sidecar and `exec` keep ignoring SIGPIPE and see EPIPE.
    pub fn only_prints(&self) -> bool {
        !matches!(
            self,
            Command::Dev(_)
                | Command::Serve { .. }
                | Command::Demo(_)
                | Command::Bench(_)
                | Command::Sidecar { .. }
                | Command::Exec(_)
        )
    }
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Keep serving the API and the web console after the demo runs (until Ctrl-C).
    #[arg(long)]
    pub keep: bool,
    /// Where the demo's API and console listen (loopback only; port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub http: String,
    /// `json`: the narrative goes to stderr, one JSON summary to stdout.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

#[derive(Debug, Args)]
pub struct DevArgs {
    /// Where the REST API, the console and /metrics listen (loopback only).
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub http: String,
    /// Where sidecars attach (gRPC link; loopback only).
    #[arg(long, default_value = "127.0.0.1:7071")]
    pub grpc: String,
    /// Directory of the SQLite store, spool and `madeira exec` socket (created if missing).
    #[arg(long, default_value = ".madeira")]
    pub data: PathBuf,
    /// Apply every *.yaml / *.yml here at start.
    #[arg(long)]
    pub flows: Option<PathBuf>,
    /// Sidecar jobs for the in-process sidecar (group `local`).
    #[arg(long)]
    pub jobs: Option<PathBuf>,
    /// Server config (alerts, http executor policy, retention).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Start the cron scheduler's clock at this instant (RFC 3339), running at
    /// the real pace: try a schedule on a given date (e.g. a holiday) now.
    #[arg(long, env = "MADEIRA_DEV_CLOCK_START", hide = true)]
    pub clock_start: Option<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    pub flow: String,
    /// `key=value`; the value is parsed as JSON when it is valid JSON.
    #[arg(long = "param", short = 'p')]
    pub params: Vec<String>,
    /// Same key, same run: a retried call never starts a second run.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// The run's business date, YYYY-MM-DD (default: the flow's `biz_date` rule
    /// applied to now). A rerun of a date a scheduled run already did.
    #[arg(long, value_parser = biz_date_arg)]
    pub biz_date: Option<String>,
    /// Wait for the run to finish: exit 0 if it succeeded, 1 if it failed or was
    /// cancelled; at a manual node it says who must decide (and how) and keeps waiting.
    #[arg(long)]
    pub wait: bool,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// `--biz-date`: refused unless YYYY-MM-DD before anything is sent.
fn biz_date_arg(s: &str) -> Result<String, String> {
    madeira_core::bizdate::parse_date(s.trim()).map(madeira_core::bizdate::format_date)
}

/// `--reason` of an operator action: refused blank before anything is sent.
fn non_blank_reason(s: &str) -> Result<String, String> {
    match s.trim() {
        "" => Err("the reason is blank: say why (it is kept in the audit trail)".into()),
        reason => Ok(reason.to_string()),
    }
}

#[derive(Debug, Args)]
pub struct NodeActionArgs {
    pub run_id: String,
    pub node: String,
    /// Why (required, not blank): kept in the audit trail.
    #[arg(long, value_parser = non_blank_reason)]
    pub reason: String,
    /// With `rerun`: rerun the nodes downstream too.
    #[arg(long)]
    pub downstream: bool,
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct AlertsArgs {
    #[command(subcommand)]
    pub command: Option<AlertsCommand>,
    /// pending, firing or resolved.
    #[arg(long)]
    pub status: Option<String>,
    /// Only this flow.
    #[arg(long)]
    pub flow: Option<String>,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 20)]
    pub limit: u32,
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(Debug, Subcommand)]
pub enum AlertsCommand {
    /// Send a test message on a channel now.
    Test {
        channel: String,
        #[command(flatten)]
        server: ServerArgs,
    },
}

#[derive(Debug, Args)]
pub struct PromoteArgs {
    /// The observe flow (`crontab import` names it after the job).
    pub flow: String,
    /// The crontab `madeira crontab import` rewrote (`-`: read stdin, print the result).
    #[arg(long, value_name = "FILE", required_unless_present = "xxl_db", conflicts_with = "xxl_db")]
    pub crontab: Option<PathBuf>,
    /// For a flow `madeira import xxl-job` wrote: XXL-JOB's database
    /// (mysql://user:pass@host:3306/xxl_job); promote stops the job there
    /// (`trigger_status` 0), demote starts it again.
    #[arg(long, value_name = "URL")]
    pub xxl_db: Option<String>,
    /// Edit FILE in place (its previous content goes to FILE.bak) instead of printing it.
    #[arg(long)]
    pub write: bool,
    /// Recorded in the audit entry.
    #[arg(long)]
    pub reason: Option<String>,
    #[command(flatten)]
    pub server: ServerArgs,
}

#[derive(Debug, Subcommand)]
pub enum FlowsCommand {
    /// The versions of a flow; `--diff A B` shows what changed between two.
    History {
        name: String,
        /// Show what changed between two versions.
        #[arg(long, num_args = 2, value_names = ["A", "B"])]
        diff: Option<Vec<u32>>,
        #[command(flatten)]
        server: ServerArgs,
    },
    /// Delete a flow (refused while runs are active unless `--cancel`).
    ///
    /// It leaves every list and stops triggering; its runs and audit stay
    /// readable unless `--purge`. Needs an admin token; audited.
    Delete {
        /// The flow to delete.
        name: String,
        /// Cancel the flow's QUEUED and RUNNING runs first (each audited as a cancel).
        #[arg(long)]
        cancel: bool,
        /// Also delete its versions and runs (the audit trail stays).
        #[arg(long)]
        purge: bool,
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        server: ServerArgs,
    },
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The job name the run is reported as.
    #[arg(long)]
    pub job: String,
    /// The observe-only flow to record the run in (default: the job name).
    #[arg(long)]
    pub flow: Option<String>,
    /// The sidecar's Unix socket.
    #[arg(long, env = "MADEIRA_SIDECAR", default_value = "/var/lib/madeira/spool/sidecar.sock")]
    pub sidecar: PathBuf,
    /// The command and its arguments, run without a shell.
    #[arg(last = true, required = true)]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, Subcommand)]
pub enum ImportCommand {
    /// XXL-JOB's jobs (xxl_job_group, xxl_job_info) as observe-mode flows, one per job chain.
    #[command(name = "xxl-job")]
    XxlJob {
        /// XXL-JOB's database, mysql://user:pass@host:3306/xxl_job.
        #[arg(long)]
        from: String,
        /// Only this executor app (`xxl_job_group.app_name`).
        #[arg(long)]
        app: Option<String>,
        /// Write one FLOW.yaml per flow into this directory instead of printing.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Timezone of the cron triggers (XXL-JOB uses its admin's JVM timezone).
        #[arg(long, default_value = "Asia/Shanghai")]
        timezone: String,
        /// `text` for people, `json` (one document on stdout: flows, refused jobs,
        /// notes) for scripts.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

#[derive(Debug, Subcommand)]
pub enum CrontabCommand {
    /// Translate crontabs into observe-mode flows, sidecar jobs and a wrapped crontab.
    Import {
        /// Crontab files, or /etc/cron.d-style directories.
        #[arg(required = true)]
        paths: Vec<PathBuf>,
        /// Sidecar group of the generated jobs and flows.
        #[arg(long, default_value = "cron")]
        group: String,
        /// How late a run may start (and how long it may take) before a warning.
        #[arg(long, default_value = "10m")]
        grace: String,
        /// Write flows/, sidecar-jobs.yaml and crontab into this directory instead of printing.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Path of the madeira binary in the rewritten crontab (default: this binary's
        /// absolute path, since cron's PATH is only /usr/bin:/bin).
        #[arg(long)]
        madeira: Option<String>,
        /// The sidecar's exec socket, set as MADEIRA_SIDECAR in the rewritten crontab.
        #[arg(long, default_value = "/var/lib/madeira/spool/sidecar.sock")]
        sidecar: PathBuf,
        /// Read FILE arguments as system crontabs (with a user column), like /etc/crontab.
        #[arg(long)]
        system: bool,
        /// Schedule timezone when a crontab sets neither CRON_TZ nor TZ.
        #[arg(long, default_value = "UTC")]
        timezone: String,
        /// Spread jobs that start in the same minute (3 or more) over this long:
        /// job k of n moves k/n of it later (`10m`; whole minutes).
        #[arg(long)]
        jitter: Option<String>,
        /// `text` for people, `json` (one document on stdout) for scripts.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

#[derive(Debug, Subcommand)]
pub enum CalendarsCommand {
    /// One year of a calendar as a month grid: days off and make-up workdays marked.
    Show {
        name: String,
        /// The year to show (default: this year).
        #[arg(long)]
        year: Option<i32>,
        #[command(flatten)]
        server: ServerArgs,
    },
}

#[derive(Debug, Subcommand)]
pub enum CronCommand {
    /// Print the next fire instants of a cron expression.
    Next {
        expr: String,
        /// IANA timezone the expression is read in (e.g. Asia/Shanghai).
        #[arg(long, default_value = "UTC")]
        timezone: String,
        /// Start from this instant (RFC 3339); default now.
        #[arg(long)]
        from: Option<String>,
        /// How many fire times to print.
        #[arg(long, default_value_t = 5)]
        count: usize,
        /// Fire only on this calendar's business days (`weekdays`, `cn-workdays`, or
        /// one defined in `--config`).
        #[arg(long)]
        calendar: Option<String>,
        /// With `--calendar`: `skip` a day off, or move its tick to the `next` or
        /// `previous` business day.
        #[arg(long, default_value = "skip", requires = "calendar")]
        calendar_mode: String,
        /// Server config whose `calendars:` (and flows directory's calendar files) to use.
        #[arg(long)]
        config: Option<PathBuf>,
        /// `text` for people, `json` (one document on stdout) for scripts.
        #[arg(long, value_enum, default_value_t = Output::Text)]
        output: Output,
    },
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Which scenarios to run (also: `throttle`, `cron`, `steady`, `alerts`, 10,000
    /// failure events through alert aggregation, and `history`, `--runs` runs of
    /// history over `--days` written into `--store` then timed under live load).
    /// `floor` measures what the machine allows a node (spawn, durable commit,
    /// sync) and adds the chains' ratios to it.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "idle,floor,chain,fanout,settlement,sidecar-chain,sidecar-rss"
    )]
    pub scenarios: Vec<String>,
    /// Metrics and tracing during the runs: `on`, `off`, or `both` (each chain and
    /// fan-out scenario run with telemetry off and on, side by side).
    #[arg(long, value_enum, default_value_t = TelemetryMode::Off)]
    pub telemetry: TelemetryMode,
    /// With `--telemetry both`: off/on pairs per scenario (the median is reported).
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
    /// Unmeasured runs of the chain and fan-out flows before the measured one
    /// (default: 2 for the chain, 1 for the fan-out, so the store's WAL has
    /// wrapped as in a store in service; 0 measures a new store's first run).
    #[arg(long)]
    pub warmups: Option<usize>,
    /// Concurrent runs in the settlement scenario.
    #[arg(long, default_value_t = 500)]
    pub runs: usize,
    /// Skip the settlement scenario's fold of its runs into the archive (and its
    /// ~16 s wait for their leases to lapse): `bench/compare` counts the
    /// settlement's instructions alone.
    #[arg(long)]
    pub no_fold: bool,
    /// Store to benchmark (`postgres://…`, `mysql://…` or `sqlite://…`); default: a temporary SQLite file.
    #[arg(long)]
    pub store: Option<String>,
    /// Runs per second started by the `steady` scenario (its run count is `--runs`).
    #[arg(long, default_value_t = 400)]
    pub rate: u32,
    /// Control-plane replicas (engines) sharing the store, triggered in turn.
    #[arg(long, default_value_t = 1)]
    pub replicas: usize,
    /// Days the history scenario's `--runs` are spread over (ending an hour ago).
    #[arg(long, default_value_t = 30)]
    pub days: u32,
    /// Cron flows in the cron scenario (all firing at the same instant).
    #[arg(long, default_value_t = 10_000)]
    pub flows: usize,
    /// `text` for people, `json` (one document on stdout) for scripts.
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub output: Output,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    /// Commands that run until stopped (servers, the sidecar) or pass a child's
    /// output through unchanged (`exec`): they print no result of their own.
    const NO_RESULT: [&str; 4] = ["dev", "serve", "sidecar", "exec"];

    /// Every command that can run by itself (not one that only groups subcommands).
    fn commands(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
        if !path.is_empty() && !cmd.is_subcommand_required_set() {
            out.push((path.to_string(), cmd.clone()));
        }
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            commands(sub, format!("{path} {}", sub.get_name()).trim(), out);
        }
    }

    #[test]
    fn every_command_that_prints_takes_output_json() {
        let mut all = Vec::new();
        commands(&super::Cli::command(), "", &mut all);
        assert!(all.len() > 25, "found too few commands: {:?}", all.iter().map(|c| &c.0).collect::<Vec<_>>());
        let mut missing = Vec::new();
        for (path, cmd) in &all {
            if NO_RESULT.contains(&path.as_str()) {
                continue;
            }
            let output = cmd.get_arguments().find(|a| a.get_id() == "output");
            let takes_json =
                output.is_some_and(|a| a.get_possible_values().iter().any(|v| v.get_name() == "json"));
            if !takes_json {
                missing.push(path.clone());
            }
        }
        assert!(missing.is_empty(), "commands without --output json: {missing:?}");
    }

    #[test]
    fn operator_actions_refuse_a_missing_or_blank_reason_before_sending() {
        use clap::Parser;
        let actions: [&[&str]; 6] = [
            &["confirm", "R", "n"],
            &["reject", "R", "n"],
            &["rerun", "R", "n", "--downstream"],
            &["mark-success", "R", "n"],
            &["skip", "R", "n"],
            &["cancel", "R"],
        ];
        for action in actions {
            let argv = |extra: &[&'static str]| [&["madeira"], action, extra].concat();
            let e = super::Cli::try_parse_from(argv(&[])).expect_err("no --reason").to_string();
            assert!(
                e.contains("required arguments were not provided") && e.contains("--reason <REASON>"),
                "{e}"
            );
            for blank in ["", "   ", "\t\n"] {
                let e =
                    super::Cli::try_parse_from(argv(&["--reason", blank])).expect_err("blank").to_string();
                assert!(e.contains("the reason is blank: say why (it is kept in the audit trail)"), "{e}");
            }
            let cli = super::Cli::try_parse_from(argv(&["--reason", "  diff checked "])).expect("a reason");
            let reason = match cli.command {
                super::Command::Cancel { reason, .. } => reason,
                super::Command::Confirm(a)
                | super::Command::Reject(a)
                | super::Command::Rerun(a)
                | super::Command::MarkSuccess(a)
                | super::Command::Skip(a) => a.reason,
                other => panic!("{other:?}"),
            };
            assert_eq!(reason, "diff checked", "trimmed");
        }
    }
}
