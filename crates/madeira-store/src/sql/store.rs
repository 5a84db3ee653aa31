//! Every aggregate trait (the parts of `Store`) and `AlertStore` for
//! `SqlStore<D>`: each operation is one function of this directory, run through
//! `SqlStore::write` (writer pool, the dialect's checks, retries) or
//! `SqlStore::read` (reader pool).

use async_trait::async_trait;
use serde_json::Value as Json;

use super::{
    D, alerts, archive, backfills, calendars, commands, commit, deadlines, flows, inbox, lease, lifecycle,
    node_waits, once, partitions, permits, presence, read, runs, sessions, shards, waits, xxl,
};
use crate::dialect::{Dialect, SqlStore};
use crate::{
    Advanced, AfterWait, AlertBatch, AlertQuery, AlertRow, AlertStore, ArchiveStore, AuditQuery, AuditRecord,
    AuditStore, BackfillChange, BackfillRecord, BackfillStepRow, BackfillStore, Batch, CalendarVersion,
    Claim, CommandStore, CreateOutcome, DeleteFlow, DeleteOutcome, DeliveryRow, FlowReader, FlowRecord,
    FlowStore, FlowVersion, HealthStore, HeldNode, HeldRun, InboxEvent, Lease, LeaseStore, LogRecord,
    NewBackfill, NewRun, NodeWaitState, OpenAlerts, PermitKey, PermitStore, PresenceReader, PresenceStore,
    PutFlow, QueueOutcome, QueuedEvent, Result, RetentionStore, RunCommand, RunQuery, RunReader, RunRow,
    RunStore, SessionRecord, SessionStore, ShardResult, SidecarPresence, StoredRun, TransitionRecord,
    XxlCallbackRow, XxlExecutorRow, XxlStore,
};

/// Implements `$trait` for `SqlStore<D>`: each `write fn`/`read fn` calls its
/// function with the writer/reader pool, its arguments and any `[extra]` ones (a
/// `write_bounded fn` within the answer deadline: `SqlStore::write_bounded`); a
/// `write_ids fn` (a write of transitions) also with the dialect's transition ids;
/// a `write_dialect fn` with the dialect itself.
macro_rules! forward {
    ($trait:ident { $($via:ident fn $name:ident($($arg:ident: $ty:ty),*) -> $out:ty = $f:path $([$($extra:expr),*])?;)* }) => {
        #[async_trait]
        impl $trait for SqlStore<D> {
            $(async fn $name(&self, $($arg: $ty),*) -> Result<$out> {
                forward!(@$via self, $f, $($arg,)* $($($extra,)*)?)
            })*
        }
    };
    (@write $s:ident, $f:path, $($a:expr,)*) => { $s.write(|| $f(&$s.writer, $($a),*)).await };
    (@write_bounded $s:ident, $f:path, $($a:expr,)*) => { $s.write_bounded(|| $f(&$s.writer, $($a),*)).await };
    (@write_ids $s:ident, $f:path, $($a:expr,)*) => {
        $s.write(|| $f(&$s.writer, $s.dialect.transition_ids(), $($a),*)).await
    };
    (@write_dialect $s:ident, $f:path, $($a:expr,)*) => { $s.write(|| $f(&$s.writer, &$s.dialect, $($a),*)).await };
    (@read $s:ident, $f:path, $($a:expr,)*) => { $s.read(|| $f(&$s.reader, $($a),*)).await };
}

forward!(FlowReader {
    read fn get_flow(name: &str) -> Option<FlowRecord> = flows::get_flow;
    read fn list_flows() -> Vec<FlowRecord> = flows::list_flows;
    read fn flow_version(name: &str, version: u32) -> Option<FlowVersion> = flows::flow_version;
    read fn flow_versions(name: &str) -> Vec<FlowVersion> = flows::flow_versions;
    read fn deleted_flows() -> Vec<FlowRecord> = flows::deleted_flows;
    read fn queued_events(flow: &str, limit: u32) -> Vec<QueuedEvent> = lifecycle::queued_events;
    read fn queued_event_counts() -> Vec<(String, u64)> = lifecycle::queued_event_counts;
    read fn calendars() -> Vec<CalendarVersion> = calendars::calendars;
});

forward!(FlowStore {
    write fn put_flow(name: &str, source: &str, hash: &str, now_ms: i64) -> PutFlow = flows::put_flow;
    write fn set_paused(name: &str, paused: bool, now_ms: i64) -> bool = flows::set_paused;
    write fn delete_flow(req: &DeleteFlow) -> DeleteOutcome = lifecycle::delete_flow;
    write fn queue_event(event: &QueuedEvent, limit: u32) -> QueueOutcome = lifecycle::queue_event;
    write fn remove_queued_events(ids: &[i64]) -> () = lifecycle::remove_queued_events;
    write fn put_calendar(name: &str, source: &str, hash: &str, now_ms: i64) -> PutFlow = calendars::put_calendar;
});

forward!(RunReader {
    read fn run_waits(run_id: &str) -> Vec<AfterWait> = waits::run_waits;
    write fn node_waits(run_id: &str) -> Vec<NodeWaitState> = node_waits::node_waits;
    read fn held_by_after() -> Vec<HeldRun> = waits::held_by_after;
    read fn node_durations(flow: &str, runs: u32) -> Vec<(String, i64)> = once::node_durations;
    read fn last_cron_key(flow: &str) -> Option<String> = read::last_cron_key;
    read fn load_run(run_id: &str) -> Option<StoredRun> = read::load_run;
    read fn list_runs(query: &RunQuery) -> Vec<RunRow> = read::list_runs;
    read fn count_runs(state: &str, since_id: &str, cap: u32) -> u32 = read::count_runs;
    read fn awaiting_confirmation(limit: u32) -> Vec<String> = read::awaiting_confirmation;
    read fn transitions(run_id: &str) -> Vec<TransitionRecord> = read::transitions;
    read fn logs(run_id: &str, node: &str) -> Vec<LogRecord> = read::logs;
    read fn shard_results(run_id: &str, node: &str, key: &str) -> Vec<ShardResult> = shards::list;
});

forward!(RunStore {
    write_ids fn create_run(run: &NewRun) -> CreateOutcome = runs::create_run;
    write_ids fn create_runs(new: &[NewRun]) -> Vec<CreateOutcome> = runs::create_runs;
    read fn after_dependents(flow: &str, date: &str) -> Vec<String> = waits::after_dependents;
    read fn waited_upstreams() -> Vec<String> = waits::waited_upstreams;
    write fn held_runs(flow: &str, date: &str) -> Vec<RunRow> = waits::held_runs;
    write fn waive_waits(run_id: &str) -> bool = waits::waive_waits;
    read fn node_waiters(flow: &str, date: &str) -> Vec<(String, Option<String>)> = node_waits::node_waiters;
    read fn held_nodes() -> Vec<HeldNode> = node_waits::held_nodes;
    write fn waive_node_waits(run_id: &str, node: &str) -> bool = node_waits::waive_node_waits;
    write fn subflow_parent(run_id: &str) -> Option<(String, Option<String>)> = node_waits::subflow_parent;
    write_ids fn promote_queued(flow: &str, max: u32, now_ms: i64) -> Option<String> = runs::promote_queued;
    write fn record_deadline_miss(flow: &str, biz_date: &str, now_ms: i64) -> bool = deadlines::record_deadline_miss;
    write fn record_once(flow: &str, key: &str, now_ms: i64) -> bool = once::record_once;
    write_ids fn set_wait_reason(run_id: &str, reason: Option<&str>, admit_ms: Option<i64>) -> bool = runs::set_wait_reason;
    write_dialect fn commit(batch: &Batch) -> () = commit::commit;
    write fn unfinished_runs() -> Vec<String> = read::unfinished_runs;
    write fn put_shard_result(result: &ShardResult) -> () = shards::put;
});

forward!(AuditStore {
    read fn audit(query: &AuditQuery) -> Vec<AuditRecord> = read::audit;
});

forward!(LeaseStore {
    write fn claim_run(run_id: &str, lease: &Lease, steal_idle: bool) -> Claim = lease::claim_run [None];
    write fn adopt_run(run_id: &str, from: &str, lease: &Lease) -> Claim = lease::adopt_run;
    write fn claim_expired(lease: &Lease, limit: u32) -> Vec<String> = lease::claim_expired;
    write fn renew_leases(lease: &Lease) -> u64 = lease::renew_leases;
});

forward!(PermitStore {
    write fn try_permit(key: &PermitKey, owner: &str, max: u32, now_ms: i64) -> bool = permits::try_permit;
});

forward!(CommandStore {
    write fn send_command(cmd: &RunCommand) -> i64 = commands::send_command;
    write fn take_commands(target: &str, now_ms: i64) -> Vec<RunCommand> = commands::take_commands;
    write fn answer_command(id: i64, answer: &str, now_ms: i64) -> () = commands::answer_command;
    write fn command_answer(id: i64) -> Option<String> = commands::command_answer;
    write fn withdraw_command(id: i64) -> bool = commands::withdraw_command;
});

forward!(PresenceReader {
    write fn sidecar_hosts(group: &str, job: &str, since_ms: i64) -> Vec<String> = presence::hosts;
    write fn sidecar_presence(since_ms: i64) -> Vec<(String, SidecarPresence, i64)> = presence::all;
});

forward!(PresenceStore {
    write fn publish_sidecars(replica: &str, groups: &[SidecarPresence], now_ms: i64) -> () = presence::publish;
});

forward!(SessionStore {
    write fn put_session(session: &SessionRecord, max_live: u32, now_ms: i64) -> () = sessions::put;
    read fn get_session(id_hash: &str, now_ms: i64) -> Option<SessionRecord> = sessions::get;
    write fn delete_session(id_hash: &str) -> bool = sessions::delete;
    read fn sessions_live(now_ms: i64) -> u64 = sessions::count;
});

forward!(RetentionStore {
    write fn prune(before_ms: i64, batch: u32) -> u64 = runs::prune;
    write fn keep_partitions(from_ms: i64, to_ms: i64) -> u32 = partitions::keep;
    write fn drop_days(before_ms: i64) -> u32 = partitions::drop_days;
});

forward!(XxlStore {
    write fn xxl_register(app: &str, address: &str, now_ms: i64, dead_ms: i64) -> () = xxl::register;
    write fn xxl_unregister(app: &str, address: &str) -> bool = xxl::unregister;
    read fn xxl_executors(since_ms: i64) -> Vec<XxlExecutorRow> = xxl::executors;
    write fn xxl_put_callback(cb: &XxlCallbackRow) -> bool = xxl::put_callback;
    read fn xxl_callbacks(log_ids: &[i64]) -> Vec<XxlCallbackRow> = xxl::callbacks;
    write fn xxl_prune(executors_before_ms: i64, callbacks_before_ms: i64) -> u64 = xxl::prune;
});

forward!(ArchiveStore {
    write fn fold_finished(before_ms: i64, batch: u32) -> u64 = archive::fold;
    read fn folded() -> (u64, u64) = archive::counts;
});

forward!(HealthStore {
    write_bounded fn probe(now_ms: i64) -> () = runs::probe;
});

forward!(AlertStore {
    write fn write_alerts(batch: &AlertBatch) -> () = alerts::write;
    write fn open_alerts() -> OpenAlerts = alerts::open;
    read fn list_alerts(query: &AlertQuery) -> Vec<AlertRow> = alerts::list;
    read fn alert_status(id: &str) -> Option<(String, Option<String>)> = alerts::status;
    read fn deliveries_of(alert_ids: &[String]) -> Vec<DeliveryRow> = alerts::deliveries_of;
    write fn prune_alerts(before_ms: i64) -> u64 = alerts::prune;
    write fn push_alert_events(bodies: &[Json], now_ms: i64) -> () = inbox::push;
    write fn alert_events(limit: u32) -> Vec<InboxEvent> = inbox::read;
    write fn lead(role: &str, holder: &str, now_ms: i64, lease_ms: i64) -> bool = inbox::lead;
});

forward!(BackfillStore {
    write fn create_backfill(backfill: &NewBackfill, audit: &AuditRecord) -> () = backfills::create;
    write fn advance_backfill(id: &str, now_ms: i64, stale_ms: i64) -> Option<Advanced> = backfills::advance_backfill;
    write fn settle_backfill_step(id: &str, seq: u32, run_id: Option<&str>, note: Option<&str>) -> Option<String> = backfills::settle_step;
    read fn backfills_of_runs(run_ids: &[String]) -> Vec<String> = backfills::of_runs;
    read fn active_backfills() -> Vec<String> = backfills::active;
    read fn list_backfills(limit: u32) -> Vec<BackfillRecord> = backfills::list;
    read fn get_backfill(id: &str) -> Option<(BackfillRecord, Vec<BackfillStepRow>)> = backfills::get;
    write fn change_backfill(id: &str, action: madeira_core::estate::BackfillAction, now_ms: i64, audit: &AuditRecord) -> BackfillChange = backfills::change;
});
