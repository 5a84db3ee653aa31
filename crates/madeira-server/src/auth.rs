//! Bearer-token authentication with roles viewer < operator < admin. Without a
//! config (`madeira dev`) every request acts as `local` with the admin role.
//! Tokens are compared in constant time and never logged.

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
}

impl std::fmt::Debug for TokenEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenEntry")
            .field("name", &self.name)
            .field("role", &self.role)
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
        let Some(tokens) = &self.tokens else {
            return Ok("local".to_string());
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
        Ok(entry.name.clone())
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
}
