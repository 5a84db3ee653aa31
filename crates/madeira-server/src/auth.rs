//! Bearer-token authentication with roles viewer < operator < admin. Without a
//! config (`madeira dev`) every request acts as `local` with the admin role.
//! Tokens are compared in constant time and never logged. A token may carry a
//! `scope` over flow labels (`{team: finance}`): it then sees and acts only on
//! flows whose labels contain every pair; other flows' runs answer 404.

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use axum::http::StatusCode;

use crate::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Viewer,
    Operator,
    Admin,
}

#[derive(Clone)]
pub struct TokenEntry {
    pub name: String,
    pub role: Role,
    pub token: String,
    /// Flow labels the token is limited to; `None`: every flow.
    pub scope: Option<BTreeMap<String, String>>,
}

/// Who made a request: the token's name, role and scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub role: Role,
    /// `None`: every flow (admin tokens are always global).
    pub scope: Option<BTreeMap<String, String>>,
}

impl Caller {
    /// Whether a flow with these labels is visible to the caller.
    pub fn sees(&self, labels: &BTreeMap<String, String>) -> bool {
        match &self.scope {
            None => true,
            Some(scope) => scope.iter().all(|(k, v)| labels.get(k) == Some(v)),
        }
    }

    /// True when the caller is limited to some flows.
    pub fn is_scoped(&self) -> bool {
        self.scope.is_some()
    }
}

impl std::fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenEntry")
            .field("name", &self.name)
            .field("role", &self.role)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Default)]
pub struct AuthConfig {
    /// `None`: no authentication (dev mode, loopback only).
    pub tokens: Option<Vec<TokenEntry>>,
}

impl AuthConfig {
    /// The caller's name if its token grants at least `need`.
    pub fn authorize(&self, headers: &HeaderMap, need: Role) -> Result<String, ApiError> {
        self.caller(headers, need).map(|c| c.name)
    }

    /// The caller (name, role, scope) if its token grants at least `need`.
    pub fn caller(&self, headers: &HeaderMap, need: Role) -> Result<Caller, ApiError> {
        let Some(tokens) = &self.tokens else {
            return Ok(Caller { name: "local".to_string(), role: Role::Admin, scope: None });
        };
        let presented = headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| unauthorized("missing bearer token: send `Authorization: Bearer <token>`"))?;
        let entry = tokens
            .iter()
            .find(|t| constant_time_eq(t.token.as_bytes(), presented.trim().as_bytes()))
            .ok_or_else(|| unauthorized("unknown token"))?;
        if entry.role < need {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("token `{}` has role {:?}; this needs {:?}", entry.name, entry.role, need),
            ));
        }
        let scope = if entry.role == Role::Admin { None } else { entry.scope.clone() };
        Ok(Caller { name: entry.name.clone(), role: entry.role, scope })
    }
}

fn unauthorized(message: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = a.len() ^ b.len();
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= usize::from(x ^ y);
    }
    diff == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(axum::http::header::AUTHORIZATION, format!("Bearer {token}").parse().expect("header"));
        h
    }

    #[test]
    fn roles_are_ordered_and_checked() {
        let auth = AuthConfig {
            tokens: Some(vec![TokenEntry {
                name: "grafana".into(),
                role: Role::Viewer,
                token: "v-secret".into(),
                scope: None,
            }]),
        };
        assert_eq!(auth.authorize(&headers("v-secret"), Role::Viewer).expect("ok"), "grafana");
        assert_eq!(
            auth.authorize(&headers("v-secret"), Role::Operator).map_err(|e| e.status),
            Err(StatusCode::FORBIDDEN)
        );
        assert_eq!(
            auth.authorize(&headers("nope"), Role::Viewer).map_err(|e| e.status),
            Err(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(
            auth.authorize(&HeaderMap::new(), Role::Viewer).map_err(|e| e.status),
            Err(StatusCode::UNAUTHORIZED)
        );
    }

    #[test]
    fn scope_matches_every_label_and_admin_is_global() {
        let scope: BTreeMap<String, String> = [("team".to_string(), "finance".to_string())].into();
        let entry = |name: &str, role| TokenEntry {
            name: name.into(),
            role,
            token: format!("{name}-secret-token"),
            scope: Some(scope.clone()),
        };
        let auth =
            AuthConfig { tokens: Some(vec![entry("fin", Role::Operator), entry("root", Role::Admin)]) };
        let fin = auth.caller(&headers("fin-secret-token"), Role::Viewer).expect("ok");
        let finance: BTreeMap<String, String> =
            [("team".to_string(), "finance".to_string()), ("tier".to_string(), "1".to_string())].into();
        let ops: BTreeMap<String, String> = [("team".to_string(), "ops".to_string())].into();
        assert!(fin.sees(&finance));
        assert!(!fin.sees(&ops));
        assert!(!fin.sees(&BTreeMap::new()));
        let root = auth.caller(&headers("root-secret-token"), Role::Viewer).expect("ok");
        assert!(!root.is_scoped());
        assert!(root.sees(&ops));
    }
}
