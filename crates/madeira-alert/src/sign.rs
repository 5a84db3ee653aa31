//! Request signatures: DingTalk (`HmacSHA256(key = secret, msg = ts_ms + "\n" +
//! secret)`, base64, in the query), Feishu (`HmacSHA256(key = ts_s + "\n" +
//! secret, msg = "")`, base64, in the body) and Madeira's own webhook signature
//! (`sha256=` + hex `HmacSHA256(key = secret, msg = ts_s + "." + body)`).

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = hmac::Hmac<Sha256>;

/// HMAC-SHA256; `None` only if the key were refused, which HMAC never does.
fn hmac(key: &[u8], message: &[u8]) -> Option<Vec<u8>> {
    let mut mac = HmacSha256::new_from_slice(key).ok()?;
    mac.update(message);
    Some(mac.finalize().into_bytes().to_vec())
}

/// DingTalk's `sign` query value, base64 and not yet URL-encoded.
pub fn dingtalk(timestamp_ms: i64, secret: &str) -> Option<String> {
    let string_to_sign = format!("{timestamp_ms}\n{secret}");
    hmac(secret.as_bytes(), string_to_sign.as_bytes()).map(|mac| STANDARD.encode(mac))
}

/// Feishu's `sign` body field.
pub fn feishu(timestamp_s: i64, secret: &str) -> Option<String> {
    let key = format!("{timestamp_s}\n{secret}");
    hmac(key.as_bytes(), b"").map(|mac| STANDARD.encode(mac))
}

/// The `X-Madeira-Signature` header value of a webhook body.
pub fn webhook(timestamp_s: i64, secret: &str, body: &[u8]) -> Option<String> {
    let mut message = format!("{timestamp_s}.").into_bytes();
    message.extend_from_slice(body);
    hmac(secret.as_bytes(), &message).map(|mac| format!("sha256={}", hex::encode(mac)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dingtalk_matches_the_reference_vectors() {
        assert_eq!(
            dingtalk(1_700_000_000_000, "SECtest").as_deref(),
            Some("aZLLrriXgn05YbwaGR7knYsLeJADjr9NwLaNNKpxh4g=")
        );
        assert_eq!(
            dingtalk(1_546_084_445_901, "SEC000000000000000000000").as_deref(),
            Some("pYQxSFpN/SMV3NpYAofVYdyfC4VIW5ZAcuWIcnqjDbQ=")
        );
    }

    #[test]
    fn feishu_matches_the_reference_vector() {
        assert_eq!(
            feishu(1_700_000_000, "test").as_deref(),
            Some("eSJQnOl8XqPTMPHWz9e5IzeHS/tqoc68g2967ekIPmg=")
        );
    }

    #[test]
    fn webhook_signature_covers_timestamp_and_body() {
        let a = webhook(1, "s", b"{}").expect("sign");
        assert!(a.starts_with("sha256=") && a.len() == 7 + 64);
        assert_ne!(Some(a.clone()), webhook(2, "s", b"{}"));
        assert_ne!(Some(a), webhook(1, "s", b"{ }"));
    }
}
