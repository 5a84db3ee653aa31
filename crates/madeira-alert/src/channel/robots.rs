//! Chat robots: WeCom (markdown ≤ 4096 bytes; text ≤ 2048 bytes when someone is
//! @mentioned, the only type where mentions work), DingTalk (markdown, body ≤
//! 20,000 bytes, `timestamp`+`sign` query when a secret is given) and Feishu (text
//! with `<at>` tags, `timestamp`+`sign` in the body when a secret is given).

use serde_json::json;

use super::{Outgoing, Request, fit_body};
use crate::render::{fit, render};
use crate::sign;

const WECOM_MARKDOWN_MAX: usize = 4096;
const WECOM_TEXT_MAX: usize = 2048;
const DINGTALK_BODY_MAX: usize = 20_000;
const FEISHU_BODY_MAX: usize = 20_000;

fn json_request(url: reqwest::Url, body: Vec<u8>) -> Request {
    Request { url, headers: vec![("content-type", "application/json".into())], body }
}

pub(super) fn wecom(url: reqwest::Url, out: &Outgoing<'_>) -> Request {
    let message = render(out.content, out.base);
    let m = out.mentions;
    let body = if m.is_empty() {
        json!({"msgtype": "markdown", "markdown": {"content": fit(&message.markdown(), WECOM_MARKDOWN_MAX)}})
    } else {
        let mut users = m.users.clone();
        if m.all {
            users.push("@all".into());
        }
        json!({"msgtype": "text", "text": {
            "content": fit(&message.plain(), WECOM_TEXT_MAX),
            "mentioned_list": users,
            "mentioned_mobile_list": m.mobiles,
        }})
    };
    json_request(url, body.to_string().into_bytes())
}

pub(super) fn dingtalk(
    mut url: reqwest::Url,
    secret: Option<&str>,
    out: &Outgoing<'_>,
) -> Result<Request, String> {
    if let Some(secret) = secret {
        let sign = sign::dingtalk(out.now_ms, secret).ok_or("signing failed")?;
        // Url encodes the raw base64 once (`+` → %2B, `/` → %2F, `=` → %3D).
        url.query_pairs_mut().append_pair("timestamp", &out.now_ms.to_string()).append_pair("sign", &sign);
    }
    let message = render(out.content, out.base);
    let m = out.mentions;
    let mut text = message.markdown();
    let tags: Vec<String> = m.mobiles.iter().chain(&m.users).map(|who| format!("@{who}")).collect();
    if !tags.is_empty() {
        text = format!("{}\n\n{text}", tags.join(" "));
    }
    let title = fit(&message.title, 200);
    let body = fit_body(&text, DINGTALK_BODY_MAX, |text| {
        json!({
            "msgtype": "markdown",
            "markdown": {"title": title, "text": text},
            "at": {"atMobiles": m.mobiles, "atUserIds": m.users, "isAtAll": m.all},
        })
    });
    Ok(json_request(url, body))
}

pub(super) fn feishu(url: reqwest::Url, secret: Option<&str>, out: &Outgoing<'_>) -> Result<Request, String> {
    let message = render(out.content, out.base);
    let m = out.mentions;
    let mut tags: Vec<String> = m.users.iter().map(|u| format!("<at user_id=\"{u}\"></at>")).collect();
    if m.all {
        tags.push("<at user_id=\"all\"></at>".into());
    }
    let mut text = message.plain();
    if !tags.is_empty() {
        text = format!("{}\n{text}", tags.join(" "));
    }
    let signed = match secret {
        Some(secret) => {
            let ts = out.now_ms.div_euclid(1000);
            Some((ts.to_string(), sign::feishu(ts, secret).ok_or("signing failed")?))
        }
        None => None,
    };
    let body = fit_body(&text, FEISHU_BODY_MAX, |text| {
        let mut body = json!({"msg_type": "text", "content": {"text": text}});
        if let Some((ts, sign)) = &signed {
            body["timestamp"] = json!(ts);
            body["sign"] = json!(sign);
        }
        body
    });
    Ok(json_request(url, body))
}
