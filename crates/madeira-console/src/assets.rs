//! Static assets, embedded in the binary and served under content-hashed names
//! (`app.3f9c1e2a7b.js`) with `Cache-Control: public, max-age=31536000,
//! immutable`. htmx is vendored from the npm package `htmx.org` (version and SRI
//! below); the rest is hand-written. Nothing here is built at `cargo build` time.
//! The icon is `favicon.svg`: pages link it, and `/favicon.ico` (asked for by
//! browsers and tools that never read the page) answers the same SVG.

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::Console;

/// The vendored htmx: `htmx.org` on npm, `dist/htmx.min.js`.
pub const HTMX_VERSION: &str = "2.0.11";
/// Subresource integrity of `assets/htmx.min.js` (sha384, base64).
pub const HTMX_SRI: &str = "sha384-2OatzQy1H+Zd/IIrjr1TcuDGqLXeHhbooAyJY1KdQMKnr4LZ22k31GBLdYKHmVjg";

/// One embedded file.
pub struct Asset {
    /// Logical name, e.g. `app.js`.
    pub name: &'static str,
    /// Served name with the content hash.
    pub hashed: String,
    pub body: &'static [u8],
    pub content_type: &'static str,
}

pub struct Assets {
    list: Vec<Asset>,
}

const FILES: &[(&str, &[u8], &str)] = &[
    ("htmx.min.js", include_bytes!("../assets/htmx.min.js"), "text/javascript; charset=utf-8"),
    ("app.js", include_bytes!("../assets/app.js"), "text/javascript; charset=utf-8"),
    ("run.js", include_bytes!("../assets/run.js"), "text/javascript; charset=utf-8"),
    ("style.css", include_bytes!("../assets/style.css"), "text/css; charset=utf-8"),
    ("favicon.svg", include_bytes!("../assets/favicon.svg"), "image/svg+xml"),
];

impl Assets {
    pub fn new() -> Self {
        let list = FILES
            .iter()
            .map(|(name, body, content_type)| {
                let digest = hex::encode(Sha256::digest(body));
                let (stem, ext) = name.rsplit_once('.').unwrap_or((name, ""));
                Asset { name, hashed: format!("{stem}.{}.{ext}", &digest[..10]), body, content_type }
            })
            .collect();
        Self { list }
    }

    /// The URL of the asset named `name` (`/assets/<hashed>`).
    pub fn url(&self, name: &str) -> String {
        let hashed = self.list.iter().find(|a| a.name == name).map_or(name, |a| a.hashed.as_str());
        format!("/assets/{hashed}")
    }

    fn by_hashed(&self, hashed: &str) -> Option<&Asset> {
        self.list.iter().find(|a| a.hashed == hashed)
    }
}

impl Default for Assets {
    fn default() -> Self {
        Self::new()
    }
}

/// `GET /favicon.ico`: the console's icon (an SVG; browsers read the type).
pub async fn favicon(State(console): State<Console>) -> Response {
    match console.assets.list.iter().find(|a| a.name == "favicon.svg") {
        Some(icon) => (
            [(header::CONTENT_TYPE, icon.content_type), (header::CACHE_CONTROL, "public, max-age=86400")],
            icon.body,
        )
            .into_response(),
        None => StatusCode::NO_CONTENT.into_response(),
    }
}

pub async fn serve(State(console): State<Console>, Path(name): Path<String>) -> Response {
    match console.assets.by_hashed(&name) {
        Some(asset) => (
            [
                (header::CONTENT_TYPE, asset.content_type),
                (header::CACHE_CONTROL, "public, max-age=31536000, immutable"),
            ],
            asset.body,
        )
            .into_response(),
        None => {
            (StatusCode::NOT_FOUND, [(header::CACHE_CONTROL, "no-store")], "no such asset").into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use base64::Engine;
    use sha2::Sha384;

    use super::*;

    #[test]
    fn the_vendored_htmx_matches_its_integrity_hash() {
        let body = FILES.iter().find(|f| f.0 == "htmx.min.js").expect("htmx embedded").1;
        let sri =
            format!("sha384-{}", base64::engine::general_purpose::STANDARD.encode(Sha384::digest(body)));
        assert_eq!(sri, HTMX_SRI);
        assert!(String::from_utf8_lossy(&body[..200]).contains("htmx"), "it is htmx");
    }

    #[test]
    fn names_carry_the_content_hash() {
        let assets = Assets::new();
        let url = assets.url("app.js");
        assert!(
            url.starts_with("/assets/app.")
                && url.ends_with(".js")
                && url.len() == "/assets/app..js".len() + 10
        );
        assert!(assets.by_hashed(url.trim_start_matches("/assets/")).is_some());
        assert!(assets.by_hashed("app.js").is_none(), "unhashed names are not served");
    }
}
