//! The link authenticates sidecars with their group's token: a wrong token and a
//! token of another group are refused, the right one is taken.

use std::time::Duration;

use madeira_fleet::{Fleet, FleetMetrics, FleetOptions, GroupToken};
use madeira_sidecar::{Identity, LinkOptions, Sidecar, SidecarMetrics, SidecarOptions};
use tokio_util::sync::CancellationToken;

const BILLING: &str = "billing-token-0123456789";
const STOCK: &str = "stock-token-0123456789ab";

async fn fleet() -> (Fleet, String, CancellationToken) {
    let tokens = vec![
        GroupToken { group: "billing".into(), token: BILLING.into() },
        GroupToken { group: "stock".into(), token: STOCK.into() },
    ];
    let options =
        FleetOptions { tokens: Some(tokens), ..FleetOptions::with_lost_after(Duration::from_secs(5)) };
    let fleet = Fleet::with_metrics(options, FleetMetrics::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let cancel = CancellationToken::new();
    tokio::spawn(fleet.clone().serve(listener, cancel.clone()));
    (fleet, format!("http://{addr}"), cancel)
}

fn sidecar(endpoint: &str, token: Option<&str>, dir: &std::path::Path) -> Sidecar {
    Sidecar::new(SidecarOptions {
        identity: Identity { name: "b-01".into(), group: "billing".into(), version: "test".into() },
        link: LinkOptions {
            endpoint: endpoint.into(),
            token: token.map(str::to_string),
            tls: None,
            backoff_min: Duration::from_millis(20),
            backoff_max: Duration::from_millis(100),
        },
        jobs: Default::default(),
        spool_dir: dir.to_path_buf(),
        socket: None,
        exec: madeira_sidecar::ExecPolicy::owner_only(Vec::new()),
        shutdown_grace: Duration::from_secs(1),
        hide_env: Vec::new(),
        metrics: SidecarMetrics::unregistered(),
    })
    .expect("sidecar")
}

async fn connects(endpoint: &str, token: Option<&str>) -> bool {
    let dir = tempfile::tempdir().expect("tempdir");
    let sidecar = sidecar(endpoint, token, dir.path());
    let mut handle = sidecar.handle();
    let cancel = CancellationToken::new();
    let task = tokio::spawn(sidecar.run(cancel.clone()));
    let connected = handle.wait_connected(Duration::from_millis(1500)).await;
    cancel.cancel();
    let _ = task.await;
    connected
}

#[tokio::test]
async fn only_the_groups_own_token_is_accepted() {
    let (fleet, endpoint, cancel) = fleet().await;
    assert!(!connects(&endpoint, None).await, "no token");
    assert!(!connects(&endpoint, Some("wrong-token-0123456789")).await, "unknown token");
    assert!(!connects(&endpoint, Some(STOCK)).await, "another group's token");
    assert!(fleet.sidecars().is_empty());
    assert!(connects(&endpoint, Some(BILLING)).await, "its own token");
    assert_eq!(fleet.sidecars().len(), 1);
    assert_eq!(fleet.sidecars()[0].group, "billing");
    cancel.cancel();
}
