//! The SQL of every store operation, written once. This directory is compiled
//! inside each backend module (`#[path]`), which defines `D`, its `Dialect`: the
//! names below resolve to that backend's types, and each dialect difference is an
//! item of `D` (see `crate::dialect`).

mod alerts;
mod archive;
mod backfills;
mod calendars;
mod commands;
mod commit;
mod deadlines;
mod flows;
mod inbox;
mod lease;
mod lifecycle;
mod node_waits;
mod once;
mod partitions;
mod permits;
mod presence;
mod read;
mod runs;
mod sessions;
mod shards;
mod store;
mod waits;
mod xxl;

use sqlx::QueryBuilder;
use sqlx::query_builder::Separated;

use crate::dialect::{Dialect, RowStatement, TransitionIds, Val};
use crate::packed::Entry;

pub(super) type D = super::D;
type Db = <D as Dialect>::DB;
type Pool = sqlx::Pool<Db>;
type Tx<'c> = sqlx::Transaction<'c, Db>;
/// A connection, or a transaction's (`&mut tx` coerces to it).
type Conn = <Db as sqlx::Database>::Connection;
type Row = <Db as sqlx::Database>::Row;

/// Where a script's statements go as they end: a connection (a transaction's), or
/// nowhere (`Taken`: a row-by-row script whose statements are taken whole for a
/// group commit, `Dialect::commit_rows`). `&mut Conn` coerces to `&mut To`.
type To = dyn Target + Send;

/// A script's target (`To`).
trait Target {
    /// The connection to send on; `None` for `Taken`.
    fn conn(&mut self) -> Option<&mut Conn>;
}

impl Target for super::DConn {
    fn conn(&mut self) -> Option<&mut Conn> {
        Some(self)
    }
}

/// The target of a group commit's row-by-row script: nothing is sent to it.
struct Taken;

impl Target for Taken {
    fn conn(&mut self) -> Option<&mut Conn> {
        None
    }
}

/// The connection of `to`, or the error of a statement sent nowhere (a script
/// built for a group commit that would have to send something on its way).
fn conn_of(to: &mut To) -> crate::Result<&mut Conn> {
    to.conn()
        .ok_or_else(|| crate::StoreError::Refused("a group commit's statement was sent on its way".into()))
}

/// `s` with its placeholders in this database's form (`Dialect::sql`).
fn sql(s: &str) -> std::borrow::Cow<'_, str> {
    D::sql(s)
}

/// Rows per multi-row statement.
const CHUNK: usize = D::CHUNK;

/// A batch of new runs of more run and node rows than this is written row by row
/// where the dialect can (`Dialect::ROWS`): a smaller one is one script, whose
/// text repeats from write to write, so its compiled statements are cached.
const ROW_BY_ROW_FROM: usize = 16;

/// ` ON CONFLICT (keys) DO UPDATE …` replacing `columns` (comma-separated).
fn upsert(keys: &str, columns: &str) -> String {
    D::upsert(keys, &columns.split(", ").collect::<Vec<_>>())
}

/// The last of `rows` for each key, in key order: one upsert may not touch a row
/// twice (PostgreSQL), and the last write must win, as in one upsert after another.
fn last_per_key<'a, T, K: Ord>(rows: &'a [T], key: impl Fn(&'a T) -> K) -> Vec<&'a T> {
    let mut last = std::collections::BTreeMap::new();
    for row in rows {
        last.insert(key(row), row);
    }
    last.into_values().collect()
}

/// The columns of a `transitions` row, in the order `insert_transitions` binds them.
const TRANSITION_COLUMNS: &str = "run_id, at, entries";

/// Adds to `s` the statements inserting `transitions` (each with its run's id, in
/// the order they happened) into `transitions`: one row per run, its entries
/// packed (`crate::packed`). Where the store numbers the rows (`ids`, see
/// `Dialect::transition_ids`), they take the ids after the last one given, in the
/// order of the runs' first transitions, and `transition_seq` moves past them
/// in the same transaction. It fails if the counter is already past the last id
/// this store knows (another process numbered transitions meanwhile; the ids are
/// then read again); a counter behind it (a commit of this store failed after
/// taking ids) only leaves a gap.
async fn insert_transitions<'a>(
    c: &mut To,
    s: &mut Script<'a>,
    ids: Option<&TransitionIds>,
    transitions: Vec<(&'a str, Entry<'a>)>,
) -> crate::Result<()> {
    let mut runs: Vec<(&'a str, Vec<Entry<'a>>)> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for (run_id, entry) in transitions {
        let i = *index.entry(run_id).or_insert_with(|| {
            runs.push((run_id, Vec::new()));
            runs.len() - 1
        });
        runs[i].1.push(entry);
    }
    let mut rows: Vec<Vec<Val<'a>>> = runs
        .into_iter()
        .map(|(run_id, entries)| {
            let (at, packed) = crate::packed::pack(&entries);
            vec![Val::text(run_id), Val::int(at), Val::owned(packed)]
        })
        .collect();
    let Some(ids) = ids else {
        return s
            .rows(c, rows, |q, chunk| {
                q.push(format!("INSERT INTO transitions ({TRANSITION_COLUMNS}) "));
                q.push_values(chunk, push_row);
            })
            .await;
    };
    if rows.is_empty() {
        return Ok(());
    }
    let prev = match ids.last() {
        Some(last) => last,
        None => sqlx::query_scalar(&sql("SELECT seq FROM transition_seq")).fetch_one(conn_of(c)?).await?,
    };
    let mut next = prev;
    for row in &mut rows {
        next += 1;
        row.insert(0, Val::int(next));
    }
    s.rows(c, rows, |q, chunk| {
        q.push(format!("INSERT INTO transitions (id, {TRANSITION_COLUMNS}) "));
        q.push_values(chunk, push_row);
    })
    .await?;
    s.one(c, vec![Val::int(next), Val::int(prev)], |q, v| {
        bind(q.push("UPDATE transition_seq SET seq = "), &v[0]).push(" WHERE seq <= ");
        bind(q, &v[1]);
    })
    .await?;
    // The counter was past `prev` (nothing updated): the key taken fails the transaction.
    s.one(c, vec![], |q, _| {
        q.push("INSERT INTO transition_seq (id, seq) SELECT 1, 0 WHERE changes() = 0");
    })
    .await?;
    ids.set(next);
    Ok(())
}

/// Binds one row's values (for `QueryBuilder::push_values`).
fn push_row<'a>(mut b: Separated<'_, 'a, Db, &'static str>, row: Vec<Val<'a>>) {
    for v in row {
        bind_separated(&mut b, v);
    }
}

/// Binds `v` as its type.
fn bind<'q, 'a>(q: &'q mut QueryBuilder<'a, Db>, v: &Val<'a>) -> &'q mut QueryBuilder<'a, Db> {
    match v.clone() {
        Val::Int(i) => q.push_bind(i),
        Val::Text(t) => q.push_bind(t),
        Val::Bool(b) => q.push_bind(b),
    }
}

/// Binds `v` as its type, after the separator.
fn bind_separated<'a>(b: &mut Separated<'_, 'a, Db, &'static str>, v: Val<'a>) {
    match v {
        Val::Int(i) => b.push_bind(i),
        Val::Text(t) => b.push_bind(t),
        Val::Bool(x) => b.push_bind(x),
    };
}

/// Appends `(v1, v2, …)`, one bound value each, to `q` (a closing parenthesis included).
fn push_list<'a, T>(q: &mut QueryBuilder<'a, Db>, values: impl IntoIterator<Item = T>)
where
    T: 'a + sqlx::Encode<'a, Db> + sqlx::Type<Db> + Send,
{
    q.push("(");
    let mut sep = q.separated(", ");
    for v in values {
        sep.push_bind(v);
    }
    sep.push_unseparated(")");
}

/// The tables that hold a run's rows by `run_id`: deleted with the run, by
/// retention and by a flow's purge (one list, so a new one is never left behind).
const RUN_TABLES: [&str; 9] = [
    "nodes",
    "run_archive",
    "transitions",
    "node_outputs",
    "attempts",
    "logs",
    "shard_results",
    "run_waits",
    "node_waits",
];

/// The tables of `RUN_TABLES` that may be partitioned by day (`sql/partitions.rs`).
const DAY_PARTITIONED: [&str; 2] = ["logs", "run_archive"];

/// Deletes the runs `ids` (at most `CHUNK`) with their rows in `RUN_TABLES` and
/// `also` (more tables by `run_id`); answers how many runs were deleted. With
/// `partitioned` (`Dialect::partitioned_ids`), the rows of `DAY_PARTITIONED` of
/// runs in that id range are left to their day's drop.
async fn delete_runs(
    c: &mut Conn,
    ids: &[String],
    also: &[&str],
    partitioned: Option<&(String, String)>,
) -> crate::Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    let unpartitioned: Vec<&String> = match partitioned {
        Some((lo, hi)) => ids.iter().filter(|id| *id < lo || *id >= hi).collect(),
        None => ids.iter().collect(),
    };
    for table in RUN_TABLES.iter().chain(also) {
        let ids: Vec<&String> = match DAY_PARTITIONED.contains(table) {
            true => unpartitioned.clone(),
            false => ids.iter().collect(),
        };
        if ids.is_empty() {
            continue;
        }
        let mut q: QueryBuilder<Db> = QueryBuilder::new(format!("DELETE FROM {table} WHERE run_id IN "));
        push_list(&mut q, ids);
        q.build().execute(&mut *c).await?;
    }
    let mut q: QueryBuilder<Db> = QueryBuilder::new("DELETE FROM runs WHERE id IN ");
    push_list(&mut q, ids);
    Ok(q.build().execute(&mut *c).await?.rows_affected())
}

/// The statements of one transaction, sent as one script where the dialect takes
/// scripts (`Dialect::SCRIPTS`: SQLite, one hop to its worker thread for all of
/// them), else each as it ends; or, for a script made by `row_by_row`, kept as
/// one-row statements (for `Dialect::run_rows` or `commit_rows`). Statements are built with
/// `push_bind` only (no `$n`), so their binds stay in order across the script.
struct Script<'a> {
    q: QueryBuilder<'a, Db>,
    statements: usize,
    /// Made by `row_by_row`: each statement's SQL for one row, and its rows.
    rows: Option<Vec<RowStatement<'a>>>,
}

impl<'a> Script<'a> {
    fn new() -> Self {
        Self { q: QueryBuilder::new(""), statements: 0, rows: None }
    }

    /// A script kept as one-row statements: `send` runs them row by row inside
    /// the caller's transaction (`Dialect::run_rows`), or `take_rows` hands them
    /// to a group commit (`Dialect::commit_rows`).
    fn row_by_row() -> Self {
        Self { rows: Some(Vec::new()), ..Self::new() }
    }

    /// Starts the next statement: the builder to push it into.
    fn statement(&mut self) -> &mut QueryBuilder<'a, Db> {
        if self.statements > 0 {
            self.q.push(";\n");
        }
        self.statements += 1;
        &mut self.q
    }

    /// Adds the statements writing `rows`: `build` writes one for a chunk of at
    /// most `CHUNK` of them, binding their values (row by row: the statement for
    /// one, run for each).
    async fn rows(
        &mut self,
        c: &mut To,
        rows: Vec<Vec<Val<'a>>>,
        build: impl Fn(&mut QueryBuilder<'a, Db>, Vec<Vec<Val<'a>>>),
    ) -> crate::Result<()> {
        let Some(first) = rows.first() else { return Ok(()) };
        if let Some(list) = &mut self.rows {
            let mut q = QueryBuilder::new("");
            build(&mut q, vec![first.clone()]);
            list.push(RowStatement { sql: q.sql().to_string(), rows });
            return Ok(());
        }
        let mut rows = rows.into_iter().peekable();
        while rows.peek().is_some() {
            build(self.statement(), rows.by_ref().take(CHUNK).collect());
            self.end(c).await?;
        }
        Ok(())
    }

    /// Adds one statement, whose SQL `build` writes, binding `values`.
    async fn one(
        &mut self,
        c: &mut To,
        values: Vec<Val<'a>>,
        build: impl Fn(&mut QueryBuilder<'a, Db>, &[Val<'a>]),
    ) -> crate::Result<()> {
        if let Some(list) = &mut self.rows {
            let mut q = QueryBuilder::new("");
            build(&mut q, &values);
            list.push(RowStatement { sql: q.sql().to_string(), rows: vec![values] });
            return Ok(());
        }
        build(self.statement(), &values);
        self.end(c).await
    }

    /// Ends the statement just pushed: sent now unless the dialect takes scripts.
    async fn end(&mut self, c: &mut To) -> crate::Result<()> {
        if D::SCRIPTS { Ok(()) } else { self.send(conn_of(c)?).await }
    }

    /// The statements of a script made by `row_by_row`, taken to be run elsewhere
    /// (`Dialect::commit_rows`); empty for another script.
    fn take_rows(&mut self) -> Vec<RowStatement<'a>> {
        self.rows.take().unwrap_or_default()
    }

    /// Sends what is pending (a row-by-row script: runs it, in the caller's transaction).
    async fn send(&mut self, c: &mut Conn) -> crate::Result<()> {
        if let Some(list) = self.rows.take() {
            return D::run_rows(c, &list).await;
        }
        if self.statements > 0 {
            let keep = cacheable(self.q.sql());
            self.q.build().persistent(keep).execute(&mut *c).await?;
            self.q.reset();
            self.statements = 0;
        }
        Ok(())
    }
}

/// Whether a prepared statement is worth keeping in the connection's cache: the
/// small ones recur (a chain's commits); a multi-row statement of a burst has a
/// shape of its own each time, and keeping it would only hold its memory.
fn cacheable(sql: &str) -> bool {
    sql.len() <= 4096
}
