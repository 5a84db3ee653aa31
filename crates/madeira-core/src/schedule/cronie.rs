//! A differential test of the cron schedule against a reference model of cronie's
//! matching rule (cronie `entry.c`: a day field whose text starts with `*` sets
//! DOM_STAR/DOW_STAR; with either flag a day must match both fields, otherwise
//! either), written independently of croner: 300 random 5-field expressions, the
//! next fire times after a fixed instant in UTC, compared minute for minute.

use chrono::{Datelike, Duration as Days, TimeZone, Utc};

use super::next_fires;

/// Deterministic xorshift, so every run tests the same expressions.
struct Rng(u64);

impl Rng {
    fn next(&mut self, n: u32) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % u64::from(n)) as u32
    }
}

/// A random field over `lo..=hi`, in one of cron's forms.
fn field(rng: &mut Rng, lo: u32, hi: u32) -> String {
    let span = hi - lo + 1;
    let v = |rng: &mut Rng| lo + rng.next(span);
    match rng.next(7) {
        0 | 1 => "*".into(),
        2 => format!("*/{}", 2 + rng.next(span.min(12) - 1)),
        3 => v(rng).to_string(),
        4 => {
            let (a, b) = (v(rng), v(rng));
            format!("{}-{}", a.min(b), a.max(b))
        }
        5 => {
            let (a, b) = (v(rng), v(rng));
            format!("{}-{}/{}", a.min(b), a.max(b), 2 + rng.next(3))
        }
        _ => {
            let mut items: Vec<u32> = (0..1 + rng.next(3)).map(|_| v(rng)).collect();
            items.sort_unstable();
            items.dedup();
            items.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
        }
    }
}

/// The values a field allows (`7` in the weekday field is Sunday, as `0`).
fn values(text: &str, lo: u32, hi: u32) -> Vec<bool> {
    let mut allowed = vec![false; hi as usize + 1];
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, s.parse::<u32>().expect("step")),
            None => (item, 1),
        };
        let (a, b) = match range {
            "*" => (lo, hi),
            r => match r.split_once('-') {
                Some((a, b)) => (a.parse().expect("from"), b.parse().expect("to")),
                None => {
                    let a = r.parse().expect("value");
                    (a, a)
                }
            },
        };
        let mut x = a;
        while x <= b {
            allowed[x as usize] = true;
            x += step;
        }
    }
    allowed
}

/// The reference: the first `n` minutes after `from` that cronie would run `expr`.
fn reference(expr: &str, from: chrono::DateTime<Utc>, n: usize) -> Vec<chrono::DateTime<Utc>> {
    let f: Vec<&str> = expr.split_whitespace().collect();
    let (minute, hour, dom, month) =
        (values(f[0], 0, 59), values(f[1], 0, 23), values(f[2], 1, 31), values(f[3], 1, 12));
    let mut dow = values(f[4], 0, 7);
    dow[0] |= dow[7];
    let day_star = f[2].starts_with('*') || f[4].starts_with('*');
    let mut out = Vec::new();
    let start = from.date_naive();
    for d in 0..(366 * 8) {
        let day = start + Days::days(d);
        let dom_ok = dom[day.day() as usize];
        let dow_ok = dow[day.weekday().num_days_from_sunday() as usize];
        let day_ok = if day_star { dom_ok && dow_ok } else { dom_ok || dow_ok };
        if !month[day.month() as usize] || !day_ok {
            continue;
        }
        for h in (0..24).filter(|h| hour[*h as usize]) {
            for m in (0..60).filter(|m| minute[*m as usize]) {
                let t = Utc.from_utc_datetime(&day.and_hms_opt(h, m, 0).expect("time"));
                if t > from {
                    out.push(t);
                    if out.len() == n {
                        return out;
                    }
                }
            }
        }
    }
    out
}

#[test]
fn day_of_month_and_weekday_combine_as_in_cronie_on_300_random_expressions() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let from = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).single().expect("instant");
    let mut or_cases = 0;
    for _ in 0..300 {
        let expr = [
            field(&mut rng, 0, 59),
            field(&mut rng, 0, 23),
            field(&mut rng, 1, 31),
            field(&mut rng, 1, 12),
            field(&mut rng, 0, 7),
        ]
        .join(" ");
        let f: Vec<&str> = expr.split_whitespace().collect();
        or_cases += usize::from(!f[2].starts_with('*') && !f[4].starts_with('*'));
        let want = reference(&expr, from, 5);
        let got: Vec<_> = next_fires(&expr, "UTC", from, want.len().max(1))
            .unwrap_or_else(|e| panic!("{expr}: {e}"))
            .iter()
            .map(|t| t.with_timezone(&Utc))
            .take(want.len())
            .collect();
        assert_eq!(got, want, "`{expr}`: madeira vs cronie's rule");
    }
    assert!(or_cases > 20, "too few expressions restrict both day fields ({or_cases})");
}

#[test]
fn the_examples_of_the_issue() {
    let from = Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).single().expect("instant");
    // Odd days that are Mondays (cronie), not odd days or Mondays.
    for t in next_fires("0 0 */2 * 1", "UTC", from, 6).expect("fires") {
        assert_eq!((t.day() % 2, t.weekday()), (1, chrono::Weekday::Mon), "{t}");
    }
    // Both restricted: the 1st and the 15th, and every Monday.
    let days: Vec<u32> =
        next_fires("0 0 1,15 * 1", "UTC", from, 6).expect("fires").iter().map(|t| t.day()).collect();
    assert_eq!(days, [7, 14, 15, 21, 28, 1]);
}
