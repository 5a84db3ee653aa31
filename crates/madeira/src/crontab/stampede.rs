//! Stampedes in an imported crontab: several jobs starting in the same minute
//! (the nightly 00:00 spike on a shared database), found over a reference week,
//! and `--jitter DURATION`, which spreads each such group by moving its jobs'
//! start minutes apart (the first job keeps its minute).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use chrono::{DateTime, TimeZone, Utc};

/// Jobs starting in the same minute from this many on are a stampede.
pub const THRESHOLD: usize = 3;

/// A job with a schedule, as the import saw it.
#[derive(Debug, Clone)]
pub struct Planned {
    pub file: PathBuf,
    pub line: usize,
    /// The job's name in the import.
    pub name: String,
    pub schedule: String,
    pub timezone: String,
}

/// Jobs (indices into the planned list) that start together.
#[derive(Debug, Clone, PartialEq)]
pub struct Stampede {
    /// The first such minute in the reference week.
    pub first: DateTime<Utc>,
    /// How many minutes of the week they start together.
    pub times_a_week: usize,
    pub jobs: Vec<usize>,
}

/// Starts per week above which a job is "frequent" (more often than hourly): it
/// meets every other job and is left out of the count.
const FREQUENT: usize = 7 * 24;

/// The stampedes among `jobs`, first minute first, one per distinct job set.
pub fn find(jobs: &[Planned]) -> Vec<Stampede> {
    // A fixed Monday, so the result does not depend on today.
    let start = Utc.with_ymd_and_hms(2030, 1, 7, 0, 0, 0).single().unwrap_or_default();
    let end = start + chrono::Duration::days(7);
    let mut by_minute: BTreeMap<DateTime<Utc>, Vec<usize>> = BTreeMap::new();
    for (i, job) in jobs.iter().enumerate() {
        let Ok(fires) = madeira_core::schedule::next_fires(
            &job.schedule,
            &job.timezone,
            start - chrono::Duration::seconds(1),
            FREQUENT + 1,
        ) else {
            continue;
        };
        let fires: Vec<DateTime<Utc>> =
            fires.into_iter().map(|t| t.with_timezone(&Utc)).take_while(|t| *t < end).collect();
        if fires.len() > FREQUENT {
            continue;
        }
        for t in fires {
            by_minute.entry(t).or_default().push(i);
        }
    }
    let mut groups: Vec<Stampede> = Vec::new();
    for (at, set) in by_minute {
        if set.len() < THRESHOLD {
            continue;
        }
        match groups.iter_mut().find(|g| g.jobs == set) {
            Some(g) => g.times_a_week += 1,
            None => groups.push(Stampede { first: at, times_a_week: 1, jobs: set }),
        }
    }
    groups
}

/// `schedule` started `minutes` later, when its minute is one number and its
/// hour one number or `*` (and the shift stays in the same hour, or day).
pub fn shifted(schedule: &str, minutes: u32) -> Result<String, String> {
    let schedule = match schedule.trim() {
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        "@weekly" => "0 0 * * 0",
        "@monthly" => "0 0 1 * *",
        "@yearly" | "@annually" => "0 0 1 1 *",
        other => other,
    };
    let fields: Vec<&str> = schedule.split_whitespace().collect();
    let [minute, hour, rest @ ..] = fields.as_slice() else {
        return Err(format!("`{schedule}` is not a five-field expression"));
    };
    let minute: u32 = minute.parse().map_err(|_| format!("its minute field `{minute}` is not one number"))?;
    let (new_minute, new_hour) = if *hour == "*" {
        let m = minute + minutes;
        if m > 59 {
            return Err(format!("{m} is past the hour (the job runs every hour)"));
        }
        (m, "*".to_string())
    } else {
        let h: u32 = hour.parse().map_err(|_| format!("its hour field `{hour}` is not one number or `*`"))?;
        let total = h * 60 + minute + minutes;
        if total >= 24 * 60 {
            return Err("the shift would cross midnight into another day".to_string());
        }
        (total % 60, (total / 60).to_string())
    };
    Ok(format!("{new_minute} {new_hour} {}", rest.join(" ")))
}

/// New schedules by (file, line).
pub type Moved = HashMap<(PathBuf, usize), String>;

/// One job's outcome: its new schedule, or why it could not move.
pub type Spread = Result<String, String>;

/// New schedules (by file and line) spreading every stampede over `jitter`:
/// job k of n starts k·jitter/n later. Returns them with a note per job
/// (`Ok`: moved, `Err`: could not be moved, and why).
pub fn spread(
    jobs: &[Planned],
    stampedes: &[Stampede],
    jitter_minutes: u32,
) -> (Moved, Vec<(usize, Spread)>) {
    let mut moved = HashMap::new();
    let mut notes = Vec::new();
    let mut done = vec![false; jobs.len()];
    for group in stampedes {
        let n = group.jobs.len() as u32;
        for (k, &i) in group.jobs.iter().enumerate() {
            if done[i] {
                continue;
            }
            done[i] = true;
            let offset = k as u32 * jitter_minutes / n;
            if offset == 0 {
                continue;
            }
            let job = &jobs[i];
            let outcome = shifted(&job.schedule, offset);
            if let Ok(new) = &outcome {
                moved.insert((job.file.clone(), job.line), new.clone());
            }
            notes.push((i, outcome));
        }
    }
    (moved, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(line: usize, schedule: &str) -> Planned {
        Planned {
            file: PathBuf::from("crontab"),
            line,
            name: format!("job{line}"),
            schedule: schedule.into(),
            timezone: "UTC".into(),
        }
    }

    #[test]
    fn jobs_at_the_same_minute_are_found_and_frequent_ones_left_out() {
        let jobs = [
            job(1, "0 0 * * *"),
            job(2, "@daily"),
            job(3, "0 0 * * 1-5"),
            job(4, "* * * * *"),
            job(5, "30 2 * * *"),
            job(6, "0 0 * * *"),
        ];
        let found = find(&jobs);
        assert_eq!(found.len(), 2, "{found:?}");
        assert_eq!(found[0].jobs, [0, 1, 2, 5]);
        assert_eq!(found[0].times_a_week, 5, "weekdays");
        assert_eq!(found[0].first.format("%H:%M").to_string(), "00:00");
        assert_eq!(found[1].jobs, [0, 1, 5], "the weekend: without the weekday job");
        assert!(find(&jobs[3..5]).is_empty());
    }

    #[test]
    fn spreading_moves_start_minutes_apart_where_it_can() {
        assert_eq!(shifted("0 0 * * *", 7).as_deref(), Ok("7 0 * * *"));
        assert_eq!(shifted("55 3 * * 1-5", 10).as_deref(), Ok("5 4 * * 1-5"));
        assert_eq!(shifted("15 * * * *", 10).as_deref(), Ok("25 * * * *"));
        assert!(shifted("*/5 0 * * *", 1).is_err());
        assert!(shifted("55 23 * * *", 10).expect_err("midnight").contains("midnight"));
        assert_eq!(shifted("@daily", 1).as_deref(), Ok("1 0 * * *"));
        assert!(shifted("@reboot", 1).is_err());

        let jobs = [job(1, "0 0 * * *"), job(2, "0 0 * * *"), job(3, "0 0 * * *"), job(4, "@midnight")];
        let found = find(&jobs);
        let (moved, notes) = spread(&jobs, &found, 20);
        assert_eq!(moved.get(&(PathBuf::from("crontab"), 1)), None, "the first keeps its minute");
        assert_eq!(moved[&(PathBuf::from("crontab"), 2)], "5 0 * * *");
        assert_eq!(moved[&(PathBuf::from("crontab"), 3)], "10 0 * * *");
        assert_eq!(moved[&(PathBuf::from("crontab"), 4)], "15 0 * * *");
        assert_eq!(notes.len(), 3, "{notes:?}");
        let (_, notes) = spread(
            &[job(1, "0 0 * * *"), job(2, "*/30 0 * * *"), job(3, "0 0 * * *")],
            &[Stampede { first: Utc::now(), times_a_week: 7, jobs: vec![0, 1, 2] }],
            3,
        );
        assert!(
            notes.iter().any(|(i, r)| *i == 1 && r.as_ref().is_err_and(|e| e.contains("minute field"))),
            "{notes:?}"
        );
    }
}
