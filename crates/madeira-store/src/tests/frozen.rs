//! A database that stops answering (the process frozen, packets dropped): a read
//! and the health probe fail as unavailable within `Dialect::ANSWER_WITHIN`
//! instead of holding their caller, and the store works again once the database
//! answers. (Writes wait: see `SqlStore::write`.)
//! The freeze is a TCP proxy between the store and the real server that stops
//! passing bytes on (as SIGSTOP on the server would), then passes them on again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::Store;
use crate::mysql::MySqlStore;
use crate::postgres::PostgresStore;
use crate::testing::{MySqlTestDb, PgTestDb};

/// A proxy to `upstream` that holds every byte while frozen.
struct Freezer {
    addr: String,
    frozen: Arc<AtomicBool>,
}

impl Freezer {
    async fn start(upstream: String) -> Freezer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address").to_string();
        let frozen = Arc::new(AtomicBool::new(false));
        let flag = frozen.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else { continue };
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(pass(cr, sw, flag.clone()));
                tokio::spawn(pass(sr, cw, flag.clone()));
            }
        });
        Freezer { addr, frozen }
    }

    fn freeze(&self, frozen: bool) {
        self.frozen.store(frozen, Ordering::Release);
    }
}

/// Copies `from` to `to`, holding what it read while `frozen`.
async fn pass(
    mut from: impl AsyncReadExt + Unpin,
    mut to: impl AsyncWriteExt + Unpin,
    frozen: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        while frozen.load(Ordering::Acquire) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// `url` with its `host:port` replaced by `addr`.
fn through(url: &str, addr: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("scheme");
    let (userinfo, rest) = rest.rsplit_once('@').map_or(("", rest), |(u, r)| (u, r));
    let path = rest.find('/').map_or("", |i| &rest[i..]);
    let at = if userinfo.is_empty() { String::new() } else { format!("{userinfo}@") };
    format!("{scheme}://{at}{addr}{path}")
}

async fn stops_answering_then_answers_again(store: &dyn Store, freezer: &Freezer) {
    store.probe(1).await.expect("a write through the proxy");
    // Idle past `dialect::PING_AFTER_IDLE`: the next use pings its connection first,
    // as on a quiet server, and the ping is what meets the frozen database.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    freezer.freeze(true);
    let started = Instant::now();
    let write = tokio::time::timeout(Duration::from_secs(10), store.probe(2))
        .await
        .expect("a write was told within 10 s, not held");
    let write = write.expect_err("a frozen database takes no write");
    assert!(write.is_unavailable(), "told as unavailable: {write}");
    assert!(!write.is_transient(), "not tried again: {write}");
    let read = tokio::time::timeout(Duration::from_secs(10), store.list_flows())
        .await
        .expect("a read was told within 10 s, not held");
    let read = read.expect_err("nor answers a read");
    assert!(read.is_unavailable(), "{read}");
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(6), "told within the limit (1 s each), not held: {waited:?}");
    freezer.freeze(false);
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.probe(3).await.is_err() {
        assert!(Instant::now() < deadline, "the store works again once the database answers");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    store.put_flow("after", "flow: after\n", "h", 4).await.expect("a write after the thaw");
    assert_eq!(store.get_flow("after").await.expect("read").expect("the flow").latest_version, 1);
}

#[tokio::test]
async fn postgres_a_database_that_stops_answering_is_told_within_the_limit() {
    let Some(db) = PgTestDb::create().await.expect("PostgreSQL test database") else { return };
    let upstream = db.url.split_once("://").and_then(|(_, r)| r.rsplit_once('@')).map_or("", |(_, r)| r);
    let freezer = Freezer::start(upstream.split('/').next().expect("host:port").to_string()).await;
    let mut store = PostgresStore::open(&through(&db.url, &freezer.addr)).await.expect("open postgres");
    store.answer_within_for_tests(Duration::from_secs(1));
    stops_answering_then_answers_again(&store, &freezer).await;
}

#[tokio::test]
async fn mysql_a_database_that_stops_answering_is_told_within_the_limit() {
    let Some(db) = MySqlTestDb::create().await.expect("MySQL test database") else { return };
    let upstream = db.url.split_once("://").map_or("", |(_, r)| r.rsplit_once('@').map_or(r, |(_, r)| r));
    let freezer = Freezer::start(upstream.split('/').next().expect("host:port").to_string()).await;
    let mut store = MySqlStore::open(&through(&db.url, &freezer.addr)).await.expect("open mysql");
    store.answer_within_for_tests(Duration::from_secs(1));
    stops_answering_then_answers_again(&store, &freezer).await;
}

#[test]
fn urls_go_through_the_proxy() {
    assert_eq!(
        through("postgres://postgres@127.0.0.1:5432/t_1", "127.0.0.1:9"),
        "postgres://postgres@127.0.0.1:9/t_1"
    );
    assert_eq!(through("mysql://root@127.0.0.1:3306/db?x=1", "h:9"), "mysql://root@h:9/db?x=1");
    assert_eq!(through("mysql://127.0.0.1:3306/db", "h:9"), "mysql://h:9/db");
}
