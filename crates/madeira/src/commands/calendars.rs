//! `madeira calendars` (every calendar with its base and data range) and
//! `madeira calendars show NAME --year 2026` (a month grid: `*` a day off on a
//! weekday, `+` a make-up workday on a weekend).

use std::process::ExitCode;

use anyhow::Result;
use chrono::{Datelike, NaiveDate};
use serde_json::Value;

use super::client_cmds::print;
use crate::cli::{CalendarsCommand, ServerArgs};
use crate::client::Client;

pub async fn run(command: Option<CalendarsCommand>, server: ServerArgs) -> Result<ExitCode> {
    match command {
        None => print(&server, Client::new(&server)?.get("/calendars").await?, list_text),
        Some(CalendarsCommand::Show { name, year, server }) => {
            let query = year.map(|y| format!("?year={y}")).unwrap_or_default();
            let body = Client::new(&server)?.get(&format!("/calendars/{name}{query}")).await?;
            print(&server, body, year_text)
        }
    }
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or("-")
}

fn list_text(body: &Value) -> String {
    let mut out =
        format!("{:<20} {:<14} {:<11} {:<11}  {}\n", "NAME", "BASE", "FIRST DAY", "LAST DAY", "DESCRIPTION");
    for c in body["calendars"].as_array().into_iter().flatten() {
        out.push_str(&format!(
            "{:<20} {:<14} {:<11} {:<11}  {}\n",
            str_of(&c["name"]),
            str_of(&c["base"]),
            str_of(&c["first_known_day"]),
            str_of(&c["last_known_day"]),
            c["description"].as_str().unwrap_or(""),
        ));
    }
    out.trim_end().to_string()
}

fn dates(v: &Value) -> Vec<NaiveDate> {
    let texts = v.as_array().into_iter().flatten().filter_map(Value::as_str);
    texts.filter_map(|s| NaiveDate::parse_from_str(s, "%Y-%m-%d").ok()).collect()
}

/// The year as twelve month grids, Monday first.
fn year_text(body: &Value) -> String {
    let off = dates(&body["off_days"]);
    let make_up = dates(&body["make_up_days"]);
    let year = body["year"].as_i64().and_then(|y| i32::try_from(y).ok()).unwrap_or(1970);
    let mut out = format!(
        "{} {year}: {} business days; {} weekday(s) off (*), {} make-up workday(s) (+); data {} .. {}\n",
        str_of(&body["name"]),
        body["business_days"],
        off.len(),
        make_up.len(),
        str_of(&body["first_known_day"]),
        str_of(&body["last_known_day"]),
    );
    for month in 1..=12 {
        let Some(first) = NaiveDate::from_ymd_opt(year, month, 1) else { continue };
        out.push_str(&format!("\n{}\n Mo  Tu  We  Th  Fr  Sa  Su\n", first.format("%B")));
        let mut line = "    ".repeat(first.weekday().num_days_from_monday() as usize);
        for day in first.iter_days().take_while(|d| d.month() == month) {
            let mark = if off.contains(&day) {
                '*'
            } else if make_up.contains(&day) {
                '+'
            } else {
                ' '
            };
            line.push_str(&format!("{:>3}{mark}", day.day()));
            if day.weekday() == chrono::Weekday::Sun {
                out.push_str(line.trim_end());
                out.push('\n');
                line.clear();
            }
        }
        if !line.trim().is_empty() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    let list = |v: &[NaiveDate]| v.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ");
    out.push_str(&format!("\noff: {}\nmake-up: {}", list(&off), list(&make_up)));
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::year_text;

    #[test]
    fn the_grid_marks_days_off_and_make_up_days() {
        let body = json!({
            "name": "cn-workdays", "year": 2026, "business_days": 248,
            "first_known_day": "2025-01-01", "last_known_day": "2026-12-31",
            "off_days": ["2026-02-16", "2026-02-23"], "make_up_days": ["2026-02-14"],
        });
        let text = year_text(&body);
        assert!(text.contains(" 14+ 15"), "{text}");
        assert!(text.contains(" 16* 17"), "{text}");
        assert!(text.contains("make-up: 2026-02-14"), "{text}");
        assert!(text.starts_with("cn-workdays 2026: 248 business days"), "{text}");
    }
}
