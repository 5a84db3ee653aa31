//! The session table, kept in the store (`console_sessions`), so a session
//! outlives a restart and works on every replica sharing the store. A session id
//! is 32 random bytes (hex) in the cookie; the store keeps only its SHA-256, with
//! the token's name, role, scope, a CSRF token and the expiry. A session whose
//! token is gone from `auth.tokens`, or whose role or scope changed since, is
//! ended when next presented. At most `MAX_SESSIONS` live sessions are kept:
//! expired ones are deleted as new ones are made, then those expiring soonest.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use madeira_server::{Role, TokenEntry};
use madeira_store::{SessionRecord, SessionStore};
use sha2::{Digest, Sha256};

use crate::ConsoleError;
use crate::viewer::User;

/// Most live sessions; beyond it the ones expiring soonest are dropped.
pub const MAX_SESSIONS: u32 = 10_000;

pub struct Sessions {
    store: Arc<dyn SessionStore>,
    ttl: Duration,
    /// CSRF token of every form without auth (`madeira dev`), one per process.
    pub(crate) process_csrf: String,
}

/// 32 random bytes, hex.
pub fn random_token() -> String {
    let bytes: [u8; 32] = rand::random();
    hex::encode(bytes)
}

/// What the store keeps instead of a session id.
fn id_hash(id: &str) -> String {
    hex::encode(Sha256::digest(id.as_bytes()))
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Viewer => "viewer",
        Role::Operator => "operator",
        Role::Admin => "admin",
    }
}

fn role_of(name: &str) -> Option<Role> {
    match name {
        "viewer" => Some(Role::Viewer),
        "operator" => Some(Role::Operator),
        "admin" => Some(Role::Admin),
        _ => None,
    }
}

type Scope = Option<BTreeMap<String, String>>;

fn scope_json(scope: &Scope) -> Option<String> {
    scope.as_ref().map(|s| serde_json::to_string(s).unwrap_or_else(|_| "{}".into()))
}

fn now_ms() -> i64 {
    madeira_engine::now_ms()
}

impl Sessions {
    pub fn new(store: Arc<dyn SessionStore>, ttl: Duration) -> Self {
        Self { store, ttl, process_csrf: random_token() }
    }

    /// Opens a session for the token `entry`; returns its id (the cookie's value).
    pub async fn open(&self, entry: &TokenEntry) -> Result<String, ConsoleError> {
        let id = random_token();
        let now = now_ms();
        let scope = if entry.role == Role::Admin { None } else { entry.scope.clone() };
        let record = SessionRecord {
            id_hash: id_hash(&id),
            name: entry.name.clone(),
            role: role_name(entry.role).to_string(),
            scope: scope_json(&scope),
            csrf: random_token(),
            created_at: now,
            expires_at: now.saturating_add(i64::try_from(self.ttl.as_millis()).unwrap_or(i64::MAX)),
        };
        self.store.put_session(&record, MAX_SESSIONS, now).await?;
        Ok(id)
    }

    /// The session's user while it has not expired and its token still exists
    /// in `tokens` with the same role and scope (else the session is ended).
    pub async fn get(&self, id: &str, tokens: &[TokenEntry]) -> Result<Option<User>, ConsoleError> {
        let hash = id_hash(id);
        let Some(record) = self.store.get_session(&hash, now_ms()).await? else {
            return Ok(None);
        };
        let role = role_of(&record.role);
        let current = tokens.iter().find(|t| t.name == record.name).map(|t| {
            let scope = if t.role == Role::Admin { None } else { t.scope.clone() };
            (t.role, scope_json(&scope))
        });
        let scope: Option<Scope> = match &record.scope {
            Some(text) => serde_json::from_str(text).ok().map(Some),
            None => Some(None),
        };
        match (role, current, scope) {
            (Some(role), Some((now_role, now_scope)), Some(scope))
                if role == now_role && now_scope == record.scope =>
            {
                Ok(Some(User { name: record.name, role, csrf: record.csrf, scope }))
            }
            _ => {
                tracing::info!(actor = %record.name, "console session ended: its token was removed or changed");
                self.store.delete_session(&hash).await?;
                Ok(None)
            }
        }
    }

    /// Ends the session (sign-out).
    pub async fn close(&self, id: &str) -> Result<(), ConsoleError> {
        self.store.delete_session(&id_hash(id)).await?;
        Ok(())
    }

    /// Live sessions in the store.
    pub async fn live(&self) -> Result<u64, ConsoleError> {
        Ok(self.store.sessions_live(now_ms()).await?)
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, role: Role) -> TokenEntry {
        TokenEntry { name: name.into(), role, token: format!("{name}-token"), scope: None }
    }

    #[tokio::test]
    async fn sessions_are_stored_hashed_expire_close_and_follow_the_token_config() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store: Arc<dyn madeira_store::Store> = Arc::new(
            madeira_store::sqlite::SqliteStore::open_path(&dir.path().join("m.db")).await.expect("store"),
        );
        let sre = entry("sre", Role::Operator);
        let tokens = vec![sre.clone()];
        let sessions = Sessions::new(store.clone(), Duration::from_secs(60));
        let id = sessions.open(&sre).await.expect("open");
        assert_eq!(id.len(), 64);
        let user = sessions.get(&id, &tokens).await.expect("get").expect("live session");
        assert_eq!((user.name.as_str(), user.role), ("sre", Role::Operator));
        assert_eq!(user.csrf.len(), 64);
        // The raw id is not a key of the table; its hash is.
        assert!(store.get_session(&id, now_ms()).await.expect("raw").is_none());
        assert!(store.get_session(&id_hash(&id), now_ms()).await.expect("hash").is_some());
        assert!(sessions.get("not-a-session", &tokens).await.expect("get").is_none());
        // Another handle over the same store (a restart, another replica) sees it.
        let again = Sessions::new(store.clone(), Duration::from_secs(60));
        assert_eq!(again.get(&id, &tokens).await.expect("get").map(|u| u.csrf), Some(user.csrf));
        // A token whose role changed ends its sessions.
        let promoted = vec![entry("sre", Role::Admin)];
        assert!(sessions.get(&id, &promoted).await.expect("get").is_none());
        assert!(sessions.get(&id, &tokens).await.expect("get").is_none(), "deleted, not just refused");
        let id = sessions.open(&sre).await.expect("open");
        sessions.close(&id).await.expect("close");
        assert!(sessions.get(&id, &tokens).await.expect("get").is_none(), "closed");
        let short = Sessions::new(store, Duration::from_millis(30));
        let id = short.open(&sre).await.expect("open");
        assert!(short.get(&id, &tokens).await.expect("get").is_some());
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert!(short.get(&id, &tokens).await.expect("get").is_none(), "expired");
    }
}
