//! `Store` and `AlertStore` for `SqlStore<D>`: each operation is one function of
//! this directory, run through `SqlStore::write` (writer pool, the dialect's
//! checks, retries) or `SqlStore::read` (reader pool).

use async_trait::async_trait;
use serde_json::Value as Json;

use super::{D, alerts, commands, commit, flows, inbox, lease, permits, presence, read, runs};
use crate::dialect::SqlStore;
use crate::{
    AlertBatch, AlertQuery, AlertRow, AlertStore, AuditQuery, AuditRecord, Batch, Claim, CreateOutcome,
    DeliveryRow, FlowRecord, FlowVersion, InboxEvent, Lease, LogRecord, NewRun, OpenAlerts, PermitKey,
    PutFlow, Result, RunCommand, RunQuery, RunRow, SidecarPresence, Store, StoreError, StoredRun,
    TransitionRecord,
};

#[async_trait]
impl Store for SqlStore<D> {
    async fn put_flow(&self, name: &str, source: &str, hash: &str, now_ms: i64) -> Result<PutFlow> {
        self.write(|| flows::put_flow(&self.writer, name, source, hash, now_ms)).await
    }
    async fn get_flow(&self, name: &str) -> Result<Option<FlowRecord>> {
        self.read(|| flows::get_flow(&self.reader, name)).await
    }
    async fn list_flows(&self) -> Result<Vec<FlowRecord>> {
        self.read(|| flows::list_flows(&self.reader)).await
    }
    async fn flow_version(&self, name: &str, version: u32) -> Result<Option<FlowVersion>> {
        self.read(|| flows::flow_version(&self.reader, name, version)).await
    }
    async fn flow_versions(&self, name: &str) -> Result<Vec<FlowVersion>> {
        self.read(|| flows::flow_versions(&self.reader, name)).await
    }
    async fn set_paused(&self, name: &str, paused: bool, now_ms: i64) -> Result<bool> {
        self.write(|| flows::set_paused(&self.writer, name, paused, now_ms)).await
    }
    async fn create_run(&self, run: &NewRun) -> Result<CreateOutcome> {
        let mut outcomes = self.create_runs(std::slice::from_ref(run)).await?;
        outcomes.pop().ok_or_else(|| StoreError::Refused("no outcome for the run".into()))
    }
    async fn create_runs(&self, new: &[NewRun]) -> Result<Vec<CreateOutcome>> {
        self.write(|| runs::create_runs(&self.writer, new)).await
    }
    async fn promote_queued(&self, flow: &str, max: u32, now_ms: i64) -> Result<Option<String>> {
        self.write(|| runs::promote_queued(&self.writer, flow, max, now_ms)).await
    }
    async fn commit(&self, batch: &Batch) -> Result<()> {
        self.write(|| commit::commit(&self.writer, batch)).await
    }
    async fn last_cron_key(&self, flow: &str) -> Result<Option<String>> {
        self.read(|| read::last_cron_key(&self.reader, flow)).await
    }
    async fn load_run(&self, run_id: &str) -> Result<Option<StoredRun>> {
        self.read(|| read::load_run(&self.reader, run_id)).await
    }
    async fn unfinished_runs(&self) -> Result<Vec<String>> {
        self.write(|| read::unfinished_runs(&self.writer)).await
    }
    async fn list_runs(&self, query: &RunQuery) -> Result<Vec<RunRow>> {
        self.read(|| read::list_runs(&self.reader, query)).await
    }
    async fn transitions(&self, run_id: &str) -> Result<Vec<TransitionRecord>> {
        self.read(|| read::transitions(&self.reader, run_id)).await
    }
    async fn put_log(&self, log: &LogRecord) -> Result<()> {
        self.write(|| runs::put_log(&self.writer, log)).await
    }
    async fn logs(&self, run_id: &str, node: &str) -> Result<Vec<LogRecord>> {
        self.read(|| read::logs(&self.reader, run_id, node)).await
    }
    async fn audit(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
        self.read(|| read::audit(&self.reader, query)).await
    }
    async fn claim_run(&self, run_id: &str, lease: &Lease, steal_idle: bool) -> Result<Claim> {
        self.write(|| lease::claim_run(&self.writer, run_id, lease, steal_idle, None)).await
    }
    async fn adopt_run(&self, run_id: &str, from: &str, lease: &Lease) -> Result<Claim> {
        self.write(|| lease::claim_run(&self.writer, run_id, lease, true, Some(from))).await
    }
    async fn claim_expired(&self, lease: &Lease, limit: u32) -> Result<Vec<String>> {
        self.write(|| lease::claim_expired(&self.writer, lease, limit)).await
    }
    async fn renew_leases(&self, lease: &Lease) -> Result<u64> {
        self.write(|| lease::renew_leases(&self.writer, lease)).await
    }
    async fn try_permit(&self, key: &PermitKey, owner: &str, max: u32, now_ms: i64) -> Result<bool> {
        self.write(|| permits::try_permit(&self.writer, key, owner, max, now_ms)).await
    }
    async fn send_command(&self, cmd: &RunCommand) -> Result<i64> {
        self.write(|| commands::send_command(&self.writer, cmd)).await
    }
    async fn take_commands(&self, target: &str, now_ms: i64) -> Result<Vec<RunCommand>> {
        self.write(|| commands::take_commands(&self.writer, target, now_ms)).await
    }
    async fn answer_command(&self, id: i64, answer: &str, now_ms: i64) -> Result<()> {
        self.write(|| commands::answer_command(&self.writer, id, answer, now_ms)).await
    }
    async fn command_answer(&self, id: i64) -> Result<Option<String>> {
        self.write(|| commands::command_answer(&self.writer, id)).await
    }
    async fn withdraw_command(&self, id: i64) -> Result<bool> {
        self.write(|| commands::withdraw_command(&self.writer, id)).await
    }
    async fn publish_sidecars(&self, replica: &str, groups: &[SidecarPresence], now_ms: i64) -> Result<()> {
        self.write(|| presence::publish(&self.writer, replica, groups, now_ms)).await
    }
    async fn sidecar_hosts(&self, group: &str, job: &str, since_ms: i64) -> Result<Vec<String>> {
        self.write(|| presence::hosts(&self.writer, group, job, since_ms)).await
    }
    async fn sidecar_presence(&self, since_ms: i64) -> Result<Vec<(String, SidecarPresence, i64)>> {
        self.write(|| presence::all(&self.writer, since_ms)).await
    }
    async fn prune(&self, before_ms: i64, batch: u32) -> Result<u64> {
        self.write(|| runs::prune(&self.writer, before_ms, batch)).await
    }
    async fn probe(&self, now_ms: i64) -> Result<()> {
        self.write(|| runs::probe(&self.writer, now_ms)).await
    }
}

#[async_trait]
impl AlertStore for SqlStore<D> {
    async fn write_alerts(&self, batch: &AlertBatch) -> Result<()> {
        self.write(|| alerts::write(&self.writer, batch)).await
    }
    async fn open_alerts(&self) -> Result<OpenAlerts> {
        self.write(|| alerts::open(&self.writer)).await
    }
    async fn list_alerts(&self, query: &AlertQuery) -> Result<Vec<AlertRow>> {
        self.read(|| alerts::list(&self.reader, query)).await
    }
    async fn deliveries_of(&self, alert_ids: &[String]) -> Result<Vec<DeliveryRow>> {
        self.read(|| alerts::deliveries_of(&self.reader, alert_ids)).await
    }
    async fn prune_alerts(&self, before_ms: i64) -> Result<u64> {
        self.write(|| alerts::prune(&self.writer, before_ms)).await
    }
    async fn push_alert_events(&self, bodies: &[Json], now_ms: i64) -> Result<()> {
        self.write(|| inbox::push(&self.writer, bodies, now_ms)).await
    }
    async fn alert_events(&self, limit: u32) -> Result<Vec<InboxEvent>> {
        self.write(|| inbox::read(&self.writer, limit)).await
    }
    async fn lead(&self, role: &str, holder: &str, now_ms: i64, lease_ms: i64) -> Result<bool> {
        self.write(|| inbox::lead(&self.writer, role, holder, now_ms, lease_ms)).await
    }
}
