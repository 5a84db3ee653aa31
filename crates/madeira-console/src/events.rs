//! Live updates: one SSE stream per page, fed by the engine's broadcast of
//! committed transitions (`EngineHandle::subscribe`), never by polling the store.
//!
//! The `Hub` task numbers every engine event (ids increase monotonically; they
//! start at the hub's start time in µs so a restarted server's ids are larger),
//! keeps the last `RING` in memory and re-broadcasts them. A stream resumes after
//! `Last-Event-ID` from that ring; when the ring no longer holds the gap (or the
//! hub itself lagged behind the engine) it sends `reset`, and the page refetches
//! what it shows. Streams end when the console shuts down.
//!
//! A scoped viewer's stream carries only the flows its token sees (`Scope`: each
//! flow judged by its latest version's labels, as the API does, again after
//! `REJUDGE`); asking for another team's run or flow answers 404.

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::stream::{self, Stream, StreamExt};
use madeira_engine::RunEvent;
use serde::Deserialize;
use tokio::sync::broadcast;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_util::sync::CancellationToken;

use crate::session::Ctx;
use crate::{Console, ConsoleError};

/// How long a scoped stream keeps its judgement of a flow (its labels may change).
const REJUDGE: Duration = Duration::from_secs(10);
/// Events kept for resumption.
const RING: usize = 4096;
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One numbered event as pages receive it.
#[derive(Debug, Clone, PartialEq)]
pub struct Numbered {
    pub id: u64,
    /// `None`: a `reset` marker (the hub lagged; pages must refetch).
    pub event: Option<Arc<RunEvent>>,
}

impl Numbered {
    fn matches(&self, filter: &Filter) -> bool {
        let Some(e) = &self.event else { return true };
        filter.run.as_ref().is_none_or(|r| *r == e.run_id)
            && filter.flow.as_ref().is_none_or(|f| *f == e.flow)
    }

    fn to_sse(&self) -> Event {
        let id = self.id.to_string();
        match &self.event {
            None => Event::default().id(id).event("reset").data("{}"),
            Some(e) => {
                let data = serde_json::json!({
                    "run_id": e.run_id, "flow": e.flow, "node": e.node, "from": e.from, "to": e.to,
                    "cause": e.cause, "attempt": e.attempt, "at_ms": e.at_ms,
                });
                Event::default().id(id).event("transition").data(data.to_string())
            }
        }
    }
}

struct Inner {
    ring: Mutex<VecDeque<Arc<Numbered>>>,
    tx: broadcast::Sender<Arc<Numbered>>,
    shutdown: CancellationToken,
    /// The first id this hub gives; a smaller `Last-Event-ID` is a previous process's.
    first: u64,
}

/// The console's numbered copy of the engine's event stream.
#[derive(Clone)]
pub struct Hub {
    inner: Arc<Inner>,
}

impl Hub {
    /// Starts numbering `engine_events` until `shutdown`.
    pub fn start(engine_events: broadcast::Receiver<Arc<RunEvent>>, shutdown: CancellationToken) -> Self {
        let (tx, _) = broadcast::channel(RING);
        let first = u64::try_from(madeira_engine::now_ms()).unwrap_or(0).saturating_mul(1000) + 1;
        let ring = Mutex::new(VecDeque::with_capacity(RING));
        let hub = Self { inner: Arc::new(Inner { ring, tx, shutdown, first }) };
        tokio::spawn(hub.clone().run(engine_events, first - 1));
        hub
    }

    async fn run(self, mut events: broadcast::Receiver<Arc<RunEvent>>, mut next: u64) {
        loop {
            let received = tokio::select! {
                _ = self.inner.shutdown.cancelled() => return,
                r = events.recv() => r,
            };
            let event = match received {
                Ok(e) => Some(e),
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(
                        missed = n,
                        "console event hub lagged behind the engine; pages will refetch"
                    );
                    None
                }
                Err(broadcast::error::RecvError::Closed) => return,
            };
            next += 1;
            self.publish(Arc::new(Numbered { id: next, event }));
        }
    }

    fn publish(&self, item: Arc<Numbered>) {
        {
            let mut ring = self.inner.ring.lock().unwrap_or_else(|p| p.into_inner());
            if ring.len() == RING {
                ring.pop_front();
            }
            ring.push_back(item.clone());
        }
        let _ = self.inner.tx.send(item);
    }

    /// What a stream resuming after `last` must replay first: the events after it,
    /// or a reset when they are no longer all kept. Call after subscribing.
    fn replay(&self, last: Option<u64>) -> Vec<Arc<Numbered>> {
        let Some(last) = last else { return Vec::new() };
        let ring = self.inner.ring.lock().unwrap_or_else(|p| p.into_inner());
        let newest = ring.back().map_or(self.inner.first - 1, |e| e.id);
        let oldest = ring.front().map_or(self.inner.first, |e| e.id);
        if last + 1 >= oldest && last <= newest {
            return ring.iter().filter(|e| e.id > last).cloned().collect();
        }
        // Kept no longer, or from another process: the page refetches.
        vec![Arc::new(Numbered { id: newest, event: None })]
    }

    /// The id of the newest event numbered so far: a page rendered now resumes after it.
    pub fn last_id(&self) -> u64 {
        let ring = self.inner.ring.lock().unwrap_or_else(|p| p.into_inner());
        ring.back().map_or(self.inner.first - 1, |e| e.id)
    }

    pub fn subscribers(&self) -> usize {
        self.inner.tx.receiver_count()
    }

    /// The stream of SSE events for `filter`, resuming after `last`; with
    /// `scope`, only events of the flows it sees.
    pub fn stream(
        &self,
        filter: Filter,
        last: Option<u64>,
        scope: Option<Arc<Scope>>,
    ) -> impl Stream<Item = Result<Event, Infallible>> + use<> {
        let live = BroadcastStream::new(self.inner.tx.subscribe());
        let replay = self.replay(last);
        let after = replay.last().map(|e| e.id).or(last).unwrap_or(0);
        let head_filter = filter.clone();
        let head = stream::iter(replay.into_iter().filter(move |e| e.matches(&head_filter)));
        let tail = live.filter_map(move |item| {
            let out = match item {
                Ok(e) if e.id > after && e.matches(&filter) => Some(e),
                Ok(_) => None,
                // This stream fell behind the hub: tell the page to refetch.
                Err(BroadcastStreamRecvError::Lagged(_)) => {
                    Some(Arc::new(Numbered { id: after, event: None }))
                }
            };
            std::future::ready(out)
        });
        let shutdown = self.inner.shutdown.clone().cancelled_owned();
        let seen = head.chain(tail).filter(move |e| {
            let (scope, e) = (scope.clone(), e.clone());
            async move {
                match (&scope, &e.event) {
                    (Some(scope), Some(event)) => scope.sees(&event.flow).await,
                    _ => true,
                }
            }
        });
        seen.map(|e| Ok(e.to_sse())).take_until(shutdown)
    }
}

/// Which flows a scoped viewer's stream may carry.
pub struct Scope {
    app: madeira_server::AppState,
    caller: madeira_server::Caller,
    judged: Mutex<HashMap<String, (bool, Instant)>>,
}

impl Scope {
    pub fn new(app: madeira_server::AppState, caller: madeira_server::Caller) -> Self {
        Self { app, caller, judged: Mutex::new(HashMap::new()) }
    }

    /// Whether the caller sees `flow` (a flow that cannot be read is not seen).
    pub async fn sees(&self, flow: &str) -> bool {
        let cached = {
            let judged = self.judged.lock().unwrap_or_else(|p| p.into_inner());
            judged.get(flow).filter(|(_, at)| at.elapsed() < REJUDGE).map(|(sees, _)| *sees)
        };
        if let Some(sees) = cached {
            return sees;
        }
        let sees = match madeira_server::visible_flow(&self.app, &self.caller, flow).await {
            Ok(sees) => sees,
            Err(e) => {
                tracing::debug!(flow = %flow, error = %e, "cannot judge a flow's scope; its events are left out");
                false
            }
        };
        let mut judged = self.judged.lock().unwrap_or_else(|p| p.into_inner());
        if judged.len() > 10_000 {
            judged.clear();
        }
        judged.insert(flow.to_string(), (sees, Instant::now()));
        sees
    }
}

/// Which events a page wants.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Filter {
    #[serde(default)]
    pub run: Option<String>,
    #[serde(default)]
    pub flow: Option<String>,
    /// Resume after this id when no `Last-Event-ID` header is sent (a page's
    /// first connection names the id it was rendered at, so nothing between
    /// the render and the connection is lost).
    #[serde(default)]
    pub after: Option<u64>,
}

/// `GET /events?run=ID` or `?flow=NAME` (or neither: everything the viewer
/// sees), resumable with `Last-Event-ID`.
pub async fn stream(
    State(console): State<Console>,
    ctx: Ctx,
    headers: HeaderMap,
    Query(filter): Query<Filter>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ConsoleError> {
    let last = match headers.get("last-event-id").and_then(|v| v.to_str().ok()) {
        Some(v) => Some(
            v.trim()
                .parse::<u64>()
                .map_err(|_| ConsoleError::BadRequest("Last-Event-ID must be a number".into()))?,
        ),
        None => filter.after,
    };
    let caller = ctx.user.caller();
    let scope = match caller.is_scoped() {
        false => None,
        true => {
            let scope = Scope::new(console.app.clone(), caller);
            if let Some(run) = &filter.run {
                crate::pages::load_run(&console, &ctx.user, run).await?;
            }
            if let Some(flow) = &filter.flow
                && !scope.sees(flow).await
            {
                return Err(ConsoleError::NotFound(format!("flow {flow} not found")));
            }
            Some(Arc::new(scope))
        }
    };
    let events = console.hub.stream(filter, last, scope);
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

#[cfg(test)]
mod tests;
