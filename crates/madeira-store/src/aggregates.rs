//! The store's aggregates, one trait each, and `Store`, their sum: a component
//! names the aggregates it uses (e.g. `Arc<dyn RetentionStore>`), while the
//! engine, which writes across them in one group commit, takes the whole
//! `Store`. The aggregates the API and console read split their read side off
//! (`FlowReader`, `RunReader`, `PresenceReader`; `AuditStore` only reads): those
//! hold the readers, never the writes, which go through the engine. `AlertStore` (alerts and their inbox) is apart: the alert crate uses
//! nothing else. Every backend implements every trait (`sql/store.rs`).

use async_trait::async_trait;

use crate::*;

/// What is applied, read side: flows and their versions, the events kept for a
/// paused flow, calendars. What the API and console read.
#[async_trait]
pub trait FlowReader: Send + Sync + 'static {
    async fn get_flow(&self, name: &str) -> Result<Option<FlowRecord>>;
    async fn list_flows(&self) -> Result<Vec<FlowRecord>>;
    async fn flow_version(&self, name: &str, version: u32) -> Result<Option<FlowVersion>>;
    /// Every stored version of a flow, oldest first.
    async fn flow_versions(&self, name: &str) -> Result<Vec<FlowVersion>>;
    /// Deleted flows whose history was kept (`delete_flow` without purge).
    async fn deleted_flows(&self) -> Result<Vec<FlowRecord>>;
    /// Up to `limit` events waiting for `flow`, oldest first.
    async fn queued_events(&self, flow: &str, limit: u32) -> Result<Vec<QueuedEvent>>;
    /// Events waiting, per flow that has any.
    async fn queued_event_counts(&self) -> Result<Vec<(String, u64)>>;
    /// The latest version of every applied calendar, by name.
    async fn calendars(&self) -> Result<Vec<CalendarVersion>>;
}

/// Flows and their versions, pausing, deletion, and the events kept for a paused
/// flow: `FlowReader` and the writes (the engine's).
#[async_trait]
pub trait FlowStore: FlowReader {
    /// Stores `source` as a new version of `name` unless it equals the latest one.
    async fn put_flow(&self, name: &str, source: &str, content_hash: &str, now_ms: i64) -> Result<PutFlow>;
    async fn set_paused(&self, name: &str, paused: bool, now_ms: i64) -> Result<bool>;
    /// Deletes a flow (refused while runs of it are QUEUED or RUNNING), writing
    /// `req.audit` in the same transaction.
    async fn delete_flow(&self, req: &DeleteFlow) -> Result<DeleteOutcome>;
    /// Keeps an event for its paused flow (at most `limit` of its type), decided
    /// under the flow's lock against `set_paused`.
    async fn queue_event(&self, event: &QueuedEvent, limit: u32) -> Result<QueueOutcome>;
    async fn remove_queued_events(&self, ids: &[i64]) -> Result<()>;
    /// Stores `source` as a new version of the applied calendar `name` unless
    /// its content hash equals the latest version's.
    async fn put_calendar(
        &self,
        name: &str,
        source: &str,
        content_hash: &str,
        now_ms: i64,
    ) -> Result<PutFlow>;
}

/// Runs, read side: a run with its nodes and attempts, lists and counts, its
/// transitions, logs, waits and kept shards. What the API and console read.
#[async_trait]
pub trait RunReader: Send + Sync + 'static {
    /// What a run's `after:` resolved to (empty for a run without `after`).
    async fn run_waits(&self, run_id: &str) -> Result<Vec<AfterWait>>;
    /// The node-level waits of `run_id` (in node then entry order), each with
    /// whether it is met and where its upstream stands.
    async fn node_waits(&self, run_id: &str) -> Result<Vec<NodeWaitState>>;
    /// Runs held by an unmet `after` now (at most 1000, oldest first), for
    /// `after_policy`.
    async fn held_by_after(&self) -> Result<Vec<HeldRun>>;
    /// `(node, milliseconds)` of every SUCCESS attempt among the latest `runs`
    /// runs of `flow`, newest run first (usual durations, `deadline.warn_before`).
    async fn node_durations(&self, flow: &str, runs: u32) -> Result<Vec<(String, i64)>>;
    /// The idempotency key of the latest cron run of `flow` (`cron:<flow>:<instant>`),
    /// from which the scheduler knows the last tick it fired.
    async fn last_cron_key(&self, flow: &str) -> Result<Option<String>>;
    async fn load_run(&self, run_id: &str) -> Result<Option<StoredRun>>;
    async fn list_runs(&self, query: &RunQuery) -> Result<Vec<RunRow>>;
    /// How many runs in `state` have an id of at least `since_id`, counting no
    /// further than `cap` (the console's counts: bounded work whatever the history).
    async fn count_runs(&self, state: &str, since_id: &str, cap: u32) -> Result<u32>;
    /// The RUNNING runs with a node waiting in MANUAL_CONFIRM, the longest
    /// waiting first, at most `limit`: one query over the running runs, whatever
    /// the number of flows (the console's approvals).
    async fn awaiting_confirmation(&self, limit: u32) -> Result<Vec<String>>;
    async fn transitions(&self, run_id: &str) -> Result<Vec<TransitionRecord>>;
    /// The log of each of the node's attempts, by attempt: the stored tail, or empty
    /// content for a finished attempt that has none (an attempt that printed
    /// nothing is written without a log row).
    async fn logs(&self, run_id: &str, node: &str) -> Result<Vec<LogRecord>>;
    /// The kept shards of `run_id`'s `node` under idempotency key `key`, by index.
    async fn shard_results(&self, run_id: &str, node: &str, key: &str) -> Result<Vec<ShardResult>>;
}

/// Runs: admission and creation, promotion, the group commit (every state change
/// after creation): `RunReader` and the writes (the engine's).
#[async_trait]
pub trait RunStore: RunReader {
    /// Creates a run (QUEUED, its `created` edge recorded) with its node rows,
    /// honouring the idempotency key, throttle queues and `on_overlap` in one
    /// transaction; when `max_active_runs` leaves room it is admitted to start
    /// (`CreateOutcome::Created::start`), which the engine's `Command::Start` does.
    async fn create_run(&self, run: &NewRun) -> Result<CreateOutcome>;
    /// `create_run` for several runs in one transaction (one durable commit), each
    /// decided after the ones before it. Backends without batching loop.
    async fn create_runs(&self, runs: &[NewRun]) -> Result<Vec<CreateOutcome>> {
        let mut out = Vec::with_capacity(runs.len());
        for run in runs {
            out.push(self.create_run(run).await?);
        }
        Ok(out)
    }
    /// Admits the oldest waiting QUEUED run of `flow` to start if `max_active_runs`
    /// leaves room; returns it (the engine then starts it with `Command::Start`).
    async fn promote_queued(&self, flow: &str, max_active_runs: u32, now_ms: i64) -> Result<Option<String>>;
    /// Flows with runs held by `after` waiting for `flow` on business date `date`:
    /// once that run (or node) is SUCCESS, promoting them starts the held runs.
    async fn after_dependents(&self, flow: &str, date: &str) -> Result<Vec<String>>;
    /// Every flow a wait names (run- or node-level `after`, met or not): the
    /// flows whose successes anything may wait on.
    async fn waited_upstreams(&self) -> Result<Vec<String>>;
    /// The runs held by `after` waiting for `flow` on business date `date` (QUEUED,
    /// not admitted), oldest first: who a failed run of `flow` holds.
    async fn held_runs(&self, flow: &str, date: &str) -> Result<Vec<RunRow>>;
    /// Drops the waits of a run still held by `after` (`after_policy: run`): it then
    /// waits only for room. False when it was no longer held.
    async fn waive_waits(&self, run_id: &str) -> Result<bool>;
    /// RUNNING runs with a node INIT that waits for `flow` on business date `date`
    /// (node-level `after`), with the replica holding each: told when that run (or
    /// one of its nodes) ended SUCCESS.
    async fn node_waiters(&self, flow: &str, date: &str) -> Result<Vec<(String, Option<String>)>>;
    /// INIT nodes of RUNNING runs with an unmet node-level `after` now (at most
    /// 1000, oldest run first), for `after_policy`.
    async fn held_nodes(&self) -> Result<Vec<HeldNode>>;
    /// Drops the waits of `node` of `run_id` (`after_policy: run`, or after it
    /// failed the node): true when it had some.
    async fn waive_node_waits(&self, run_id: &str, node: &str) -> Result<bool>;
    /// For a sub-flow child run: its parent run and the replica holding it now
    /// (`None`: not a child, or no such run).
    async fn subflow_parent(&self, run_id: &str) -> Result<Option<(String, Option<String>)>>;
    /// Records that `flow`'s deadline for `biz_date` was missed: true only the
    /// first time, on any replica (the caller then raises the alert).
    async fn record_deadline_miss(&self, flow: &str, biz_date: &str, now_ms: i64) -> Result<bool>;
    /// Records that the alert `key` of `flow` fired (`fired_once`): true only
    /// the first time, on any replica (the caller then raises it).
    async fn record_once(&self, flow: &str, key: &str, now_ms: i64) -> Result<bool>;
    /// Changes why the QUEUED run `run_id` waits (`RunRow::wait_reason`); `None`
    /// releases it: admitted to start at `admit_ms` when given (the flow has no
    /// `max_active_runs`), else left to `promote_queued`. False when the run is
    /// no longer a waiting QUEUED run (another replica released it first).
    async fn set_wait_reason(
        &self,
        run_id: &str,
        reason: Option<&str>,
        admit_ms: Option<i64>,
    ) -> Result<bool>;
    /// Writes a batch of state changes and their records in one transaction.
    async fn commit(&self, batch: &Batch) -> Result<()>;
    /// Ids of runs that are QUEUED or RUNNING (for recovery: RUNNING runs are
    /// recovered, admitted QUEUED ones started, waiting ones promoted).
    async fn unfinished_runs(&self) -> Result<Vec<String>>;
    /// Keeps (replaces) a succeeded shard of a sharded attempt.
    async fn put_shard_result(&self, result: &ShardResult) -> Result<()>;
}

/// The audit trail, read side only (it is written with the changes it records,
/// by `RunStore::commit` and `FlowStore::delete_flow`).
#[async_trait]
pub trait AuditStore: Send + Sync + 'static {
    async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>>;
}

/// Which replica holds a run: claims, adoption, takeover of expired leases, renewal.
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// Takes `run_id` for `lease.owner` when it is unowned, already its own, or its
    /// lease expired; with `steal_idle`, also when no node of it is RUNNING (an
    /// operator action on a run another replica holds but is not executing).
    async fn claim_run(&self, run_id: &str, lease: &Lease, steal_idle: bool) -> Result<Claim>;
    /// Takes `run_id` for `lease.owner` from `from` (which offered it), only while
    /// `from` still holds it and no node of it is RUNNING.
    async fn adopt_run(&self, run_id: &str, from: &str, lease: &Lease) -> Result<Claim>;
    /// Takes up to `limit` runs, RUNNING or admitted to start, whose lease expired
    /// (or that nobody claimed for `UNCLAIMED_GRACE_MS`); each is claimed by one
    /// replica only. Returns them.
    async fn claim_expired(&self, lease: &Lease, limit: u32) -> Result<Vec<String>>;
    /// Extends every lease `lease.owner` holds to `lease.until_ms`.
    async fn renew_leases(&self, lease: &Lease) -> Result<u64>;
}

/// Throttle permits shared by the replicas.
#[async_trait]
pub trait PermitStore: Send + Sync + 'static {
    /// Takes a permit of `key`'s node for its run if fewer than `max` unfinished
    /// runs hold one (a run that already holds it keeps it). Serialised per node across
    /// replicas. Freed by `Batch::permit_releases`.
    async fn try_permit(&self, key: &PermitKey, owner: &str, max: u32, now_ms: i64) -> Result<bool>;
}

/// Operator actions forwarded to the replica that holds the run, and their answers.
#[async_trait]
pub trait CommandStore: Send + Sync + 'static {
    /// Queues an operator action for the replica `cmd.target`; returns its id.
    async fn send_command(&self, cmd: &RunCommand) -> Result<i64>;
    /// Takes (once) every command queued for `target`, oldest first.
    async fn take_commands(&self, target: &str, now_ms: i64) -> Result<Vec<RunCommand>>;
    async fn answer_command(&self, id: i64, answer: &str, now_ms: i64) -> Result<()>;
    /// The answer, once written.
    async fn command_answer(&self, id: i64) -> Result<Option<String>>;
    /// Withdraws a command nobody took yet; false when it was already taken.
    async fn withdraw_command(&self, id: i64) -> Result<bool>;
}

/// Which replica has live sidecars of which group and job, read side.
#[async_trait]
pub trait PresenceReader: Send + Sync + 'static {
    /// Replicas that, as of `since_ms` or later, had a live sidecar of `group`
    /// declaring `job`; most recently seen first.
    async fn sidecar_hosts(&self, group: &str, job: &str, since_ms: i64) -> Result<Vec<String>>;
    /// Every replica's report seen at `since_ms` or later: `(replica, group and
    /// jobs, seen_at)`, by replica then group.
    async fn sidecar_presence(&self, since_ms: i64) -> Result<Vec<(String, SidecarPresence, i64)>>;
}

/// Which replica has live sidecars: `PresenceReader` and each replica's report.
#[async_trait]
pub trait PresenceStore: PresenceReader {
    /// Replaces what `replica` says about its live sidecars: one entry per group.
    async fn publish_sidecars(&self, replica: &str, groups: &[SidecarPresence], now_ms: i64) -> Result<()>;
}

/// Console sessions.
#[async_trait]
pub trait SessionStore: Send + Sync + 'static {
    /// Stores a console session, first deleting expired ones and, when `max_live`
    /// live ones remain, those expiring soonest.
    async fn put_session(&self, session: &SessionRecord, max_live: u32, now_ms: i64) -> Result<()>;
    /// The session whose cookie hashes to `id_hash`, unless it expired by `now_ms`.
    async fn get_session(&self, id_hash: &str, now_ms: i64) -> Result<Option<SessionRecord>>;
    /// Ends a session (sign-out); false when there was none.
    async fn delete_session(&self, id_hash: &str) -> Result<bool>;
    /// Console sessions not expired at `now_ms`.
    async fn sessions_live(&self, now_ms: i64) -> Result<u64>;
}

/// Retention of finished runs and old audit rows.
#[async_trait]
pub trait RetentionStore: Send + Sync + 'static {
    /// Deletes up to `batch` finished runs (and everything about them) finished
    /// before `before_ms`, and audit rows older than it. Returns runs deleted.
    async fn prune(&self, before_ms: i64, batch: u32) -> Result<u64>;

    /// Makes the time partitions (PostgreSQL: `logs` and `run_archive`, one per
    /// UTC day of run ids) of the days from `from_ms`'s to `to_ms`'s that have
    /// none; answers how many were made. Idempotent, safe from several replicas
    /// at once; nothing to do on a store without partitions.
    async fn keep_partitions(&self, _from_ms: i64, _to_ms: i64) -> Result<u32> {
        Ok(0)
    }

    /// Drops the day partitions of every day ending before `before_ms` whose
    /// runs all finished before it (or are gone); answers how many days. Their
    /// runs' own rows are then deleted by `prune`, which leaves to this the rows
    /// of partitioned days. Nothing to do on a store without partitions.
    async fn drop_days(&self, _before_ms: i64) -> Result<u32> {
        Ok(0)
    }
}

/// The run archive: a finished run's nodes, attempts, node outputs and
/// transition rows folded into one compressed row. Every reader of a run gives
/// the same records folded or not; claiming a folded run unfolds it.
#[async_trait]
pub trait ArchiveStore: Send + Sync + 'static {
    /// Folds up to `batch` runs that finished before `before_ms` and that no
    /// replica holds (no live lease), in one transaction; safe on every replica at
    /// once (each run is folded by one). Returns how many were folded.
    async fn fold_finished(&self, before_ms: i64, batch: u32) -> Result<u64>;
    /// How many runs are folded, and how many nodes they hold.
    async fn folded(&self) -> Result<(u64, u64)>;
}

/// Whether the store takes writes.
#[async_trait]
pub trait HealthStore: Send + Sync + 'static {
    /// A small durable write, to learn whether the store takes writes again after
    /// a failure (the engine calls it while commits fail).
    async fn probe(&self, now_ms: i64) -> Result<()>;
}

/// Declares `$name` as the sum of the traits listed, implemented for every type
/// that implements them all.
macro_rules! sum_of {
    ($(#[$doc:meta])* $name:ident = $first:ident $(+ $part:ident)*) => {
        $(#[$doc])*
        pub trait $name: $first $(+ $part)* {}
        impl<T: $first $(+ $part)* + ?Sized> $name for T {}
    };
}

sum_of! {
    /// Everything Madeira keeps except alerts: the sum of the aggregates above.
    /// Implemented for every type that implements them all.
    Store = FlowStore + RunStore + AuditStore + LeaseStore + PermitStore + CommandStore
        + PresenceStore + SessionStore + RetentionStore + ArchiveStore + HealthStore + XxlStore
        + BackfillStore
}
