//! The store test suite, run against every backend: SQLite on a temporary file,
//! PostgreSQL (`MADEIRA_TEST_PG_URL`) and MySQL/MariaDB (`MADEIRA_TEST_MYSQL_URL`)
//! on a fresh database per test (skipped without a server unless `CI=true`). Each
//! test body lives once in `suite.rs`.

mod alerts;
mod archive;
mod backfills;
mod bizdates;
mod console;
mod estate;
mod failures;
mod frozen;
mod lease;
mod lifecycle;
mod partitions;
mod permits;
mod rows;
mod shards;
mod storage;
mod suite;
mod upgrade;
mod xxl;

use crate::Store;
use crate::mysql::{MySqlOptions, MySqlStore};
use crate::postgres::PostgresStore;
use crate::sqlite::SqliteStore;
use crate::testing::{MySqlTestDb, PgTestDb};

/// A store and what keeps its database alive (dropped after the store).
pub(crate) struct Fixture {
    pub store: Box<dyn Store>,
    _sqlite: Option<tempfile::TempDir>,
    _pg: Option<PgTestDb>,
    _mysql: Option<MySqlTestDb>,
}

pub(crate) async fn sqlite() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = SqliteStore::open_path(&dir.path().join("m.db")).await.expect("open sqlite");
    Fixture { store: Box::new(store), _sqlite: Some(dir), _pg: None, _mysql: None }
}

/// `None` when PostgreSQL is unreachable and `CI` is not set.
pub(crate) async fn postgres() -> Option<Fixture> {
    let db = PgTestDb::create().await.expect("PostgreSQL test database")?;
    let store = PostgresStore::open(&db.url).await.expect("open postgres");
    Some(Fixture { store: Box::new(store), _sqlite: None, _pg: Some(db), _mysql: None })
}

/// `None` when MySQL/MariaDB is unreachable and `CI` is not set. Row-lock waits
/// end after 2 s, so a lock cycle fails the test instead of hanging it.
pub(crate) async fn mysql() -> Option<Fixture> {
    let db = MySqlTestDb::create().await.expect("MySQL test database")?;
    let options = MySqlOptions { lock_wait_timeout: std::time::Duration::from_secs(2), ..Default::default() };
    let store = MySqlStore::open_with(&db.url, &options).await.expect("open mysql");
    Some(Fixture { store: Box::new(store), _sqlite: None, _pg: None, _mysql: Some(db) })
}

/// Generates one `#[tokio::test]` per backend for each body in `suite`.
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod sqlite_backend {
            $(
                #[tokio::test]
                async fn $name() {
                    let f = super::sqlite().await;
                    super::bodies::$name(f.store.as_ref()).await;
                }
            )*
        }
        mod postgres_backend {
            $(
                #[tokio::test]
                async fn $name() {
                    let Some(f) = super::postgres().await else { return };
                    super::bodies::$name(f.store.as_ref()).await;
                }
            )*
        }
        mod mysql_backend {
            $(
                #[tokio::test]
                async fn $name() {
                    let Some(f) = super::mysql().await else { return };
                    super::bodies::$name(f.store.as_ref()).await;
                }
            )*
        }
    };
}

mod bodies {
    pub(super) use super::archive::*;
    pub(super) use super::backfills::*;
    pub(super) use super::bizdates::*;
    pub(super) use super::console::*;
    pub(super) use super::estate::*;
    pub(super) use super::failures::a_commit_abandoned_midway_is_all_or_nothing_and_the_next_one_commits;
    pub(super) use super::lease::*;
    pub(super) use super::lifecycle::*;
    pub(super) use super::partitions::retention_drops_whole_days_and_keeps_days_with_live_runs;
    pub(super) use super::permits::*;
    pub(super) use super::rows::{
        a_large_batch_of_new_runs_is_decided_and_written_whole, a_large_fenced_batch_writes_nothing,
    };
    pub(super) use super::shards::*;
    pub(super) use super::storage::*;
    pub(super) use super::suite::*;
    pub(super) use super::xxl::*;
}

on_every_backend!(
    retention_drops_whole_days_and_keeps_days_with_live_runs,
    a_folded_run_reads_as_before_and_a_rerun_after_it_completes,
    concurrent_folds_take_each_run_once,
    xxl_executors_are_renewed_expired_and_removed,
    the_first_xxl_callback_of_a_log_id_is_kept,
    a_backfill_advances_within_parallel_and_upstream_first,
    a_backfill_skips_dates_that_succeeded_and_pauses_and_cancels,
    backfill_runs_wait_behind_other_runs_for_room,
    retention_removes_finished_backfills_once_their_runs_are_gone,
    a_run_is_held_until_its_upstream_succeeds,
    a_node_wait_is_met_by_that_node_alone,
    a_node_waits_for_another_flows_node_while_its_run_goes_on,
    a_subflow_child_finds_its_parent,
    runs_keep_their_business_date_and_are_found_by_it,
    scheduled_runs_are_one_per_business_date,
    a_run_held_for_a_reason_waits_until_released_once,
    a_deadline_miss_is_recorded_once,
    a_warning_key_fires_once,
    node_durations_are_the_latest_runs_successes_newest_first,
    applied_calendars_are_versioned_by_content,
    runs_keep_their_actor_and_are_found_by_it,
    run_counts_by_state_stop_at_their_cap,
    runs_awaiting_confirmation_are_the_running_ones_longest_waiting_first,
    attempts_keep_the_host_they_ran_on,
    sessions_expire_end_at_sign_out_and_stay_bounded,
    claims_follow_owner_and_expiry,
    commits_are_fenced_on_the_owner,
    expired_runs_are_taken_over_once,
    a_skewed_replica_clock_neither_takes_nor_keeps_leases,
    a_finished_run_never_changes_owner,
    forwarded_commands_are_taken_once_and_answered,
    sidecar_presence_names_fresh_hosts_of_a_job,
    an_offered_run_is_adopted_only_from_its_offerer_while_idle,
    permits_are_capped_across_holders_and_freed_by_commits,
    flow_versions_only_change_with_content,
    flows_list_and_pause,
    idempotency_key_returns_existing_run,
    free_form_keys_compare_byte_for_byte,
    concurrent_triggers_with_one_key_make_one_run,
    overlap_policies_are_decided_in_the_store,
    commit_writes_nodes_and_transitions_together_and_prune_removes_old_runs,
    outputs_attempts_logs_and_audit_round_trip,
    run_listing_filters_and_pages_newest_first,
    repeated_rows_in_one_batch_keep_the_last,
    trace_context_is_kept_with_the_run,
    batched_creation_refuses_full_throttle_queues,
    last_cron_key_and_version_history,
    creation_is_a_recorded_edge_and_a_start_is_decided,
    events_are_kept_only_for_a_paused_flow_once_and_bounded,
    a_paused_flow_refuses_the_runs_its_triggers_would_make,
    a_deleted_flow_keeps_or_purges_its_history,
    shard_results_are_kept_per_key_and_pruned_with_their_run,
    transitions_keep_their_order_across_statements_commits_and_runs,
    an_attempt_that_printed_nothing_answers_an_empty_log,
    a_commit_abandoned_midway_is_all_or_nothing_and_the_next_one_commits,
    a_large_fenced_batch_writes_nothing,
    a_large_batch_of_new_runs_is_decided_and_written_whole,
);
