//! Time bounds over run ids: a run id is a UUIDv7, whose text starts with the
//! 48-bit creation time in milliseconds, so "created at or after T" is "id ≥
//! `id_bound(T)`" and a time range is an id range (no timestamp column needed).
//! Also the time syntax the CLI, API and console accept for such bounds.

/// The smallest run id created at `ms` or later.
pub fn id_bound(ms: i64) -> String {
    let ms = ms.max(0) as u64;
    format!("{:08x}-{:04x}-0000-0000-000000000000", ms >> 16, ms & 0xffff)
}

/// `2026-12-01`, `2026-12-01T09:30` (UTC), `2026-12-01 09:30:15` (UTC) or RFC 3339, as Unix ms.
pub fn parse_time(s: &str) -> Option<i64> {
    let s = s.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Some(t.timestamp_millis());
    }
    for fmt in ["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"] {
        if let Ok(t) = chrono::NaiveDateTime::parse_from_str(s, fmt) {
            return Some(t.and_utc().timestamp_millis());
        }
    }
    chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()?
        .and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc().timestamp_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v7_id_sorts_between_the_bounds_of_its_millisecond() {
        let ms = 1_764_580_000_123_i64;
        let id = uuid::Uuid::new_v7(uuid::Timestamp::from_unix(uuid::NoContext, 1_764_580_000, 123_000_000))
            .to_string();
        assert!(
            id_bound(ms) <= id && id < id_bound(ms + 1),
            "{} <= {id} < {}",
            id_bound(ms),
            id_bound(ms + 1)
        );
        assert_eq!(id_bound(-5), id_bound(0), "times before 1970 clamp to the first id");
    }

    #[test]
    fn times_parse_in_the_documented_forms() {
        let day = parse_time("2026-12-01").expect("date");
        assert_eq!(parse_time("2026-12-01T00:00:00Z"), Some(day));
        assert_eq!(parse_time("2026-12-01T09:30"), Some(day + 9 * 3_600_000 + 30 * 60_000));
        assert_eq!(parse_time("2026-12-01 09:30:15"), Some(day + 9 * 3_600_000 + 30 * 60_000 + 15_000));
        assert_eq!(parse_time("2026-12-01T10:30:00+01:00"), Some(day + 9 * 3_600_000 + 30 * 60_000));
        assert_eq!(parse_time("yesterday"), None);
    }
}
