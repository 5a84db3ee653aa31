//! Process metrics read from `/proc/self` at scrape time (the standard
//! `process_*` names: resident and virtual memory, CPU seconds, open and maximum
//! file descriptors, start time) and `madeira_build_info`. Off Linux the process
//! families are simply absent.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

/// Registers `madeira_build_info{version, component}`.
pub fn register_build_info(registry: &mut Registry, version: &str, component: &str) {
    let labels =
        vec![("version".to_string(), version.to_string()), ("component".to_string(), component.to_string())];
    registry.register("madeira_build", "Build of this madeira process", Info::new(labels));
}

/// Reads `/proc/self` on each scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

#[derive(Debug, Default, PartialEq)]
pub(crate) struct ProcStat {
    pub cpu_seconds: f64,
    pub start_time_seconds: f64,
    pub virtual_bytes: f64,
    pub resident_bytes: f64,
}

/// Clock ticks per second; Linux fixes USER_HZ at 100 for `/proc`.
const TICKS: f64 = 100.0;

/// Parses `/proc/self/stat` (fields after the command name, which may hold spaces).
pub(crate) fn parse_stat(stat: &str, boot_time: f64, page_size: f64) -> Option<ProcStat> {
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime=14, stime=15, starttime=22, vsize=23, rss=24.
    let num = |i: usize| f.get(i - 3).and_then(|v| v.parse::<f64>().ok());
    Some(ProcStat {
        cpu_seconds: (num(14)? + num(15)?) / TICKS,
        start_time_seconds: boot_time + num(22)? / TICKS,
        virtual_bytes: num(23)?,
        resident_bytes: num(24)? * page_size,
    })
}

fn boot_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

fn max_fds() -> Option<f64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

fn open_fds() -> Option<f64> {
    Some(std::fs::read_dir("/proc/self/fd").ok()?.count() as f64)
}

fn gauge(enc: &mut DescriptorEncoder, name: &str, help: &str, v: f64) -> Result<(), std::fmt::Error> {
    let metric = ConstGauge::new(v);
    metric.encode(enc.encode_descriptor(name, help, None, metric.metric_type())?)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stat = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| parse_stat(&s, boot_time().unwrap_or(0.0), 4096.0));
        if let Some(stat) = stat {
            let cpu = ConstCounter::new(stat.cpu_seconds);
            cpu.encode(enc.encode_descriptor(
                "process_cpu_seconds",
                "Total user and system CPU time spent in seconds",
                None,
                cpu.metric_type(),
            )?)?;
            gauge(
                &mut enc,
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                stat.resident_bytes,
            )?;
            gauge(
                &mut enc,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                stat.virtual_bytes,
            )?;
            gauge(
                &mut enc,
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                stat.start_time_seconds,
            )?;
        }
        if let Some(n) = open_fds() {
            gauge(&mut enc, "process_open_fds", "Number of open file descriptors", n)?;
        }
        if let Some(n) = max_fds() {
            gauge(&mut enc, "process_max_fds", "Maximum number of open file descriptors", n)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_line_with_spaces_in_the_name_parses() {
        let line = "4242 (madeira (dev) x) S 1 4242 4242 0 -1 4194560 2000 0 0 0 250 50 0 0 20 0 9 0 \
                    1000 123456789 2500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let stat = parse_stat(line, 1_700_000_000.0, 4096.0).expect("parses");
        assert_eq!(
            stat,
            ProcStat {
                cpu_seconds: 3.0,
                start_time_seconds: 1_700_000_010.0,
                virtual_bytes: 123_456_789.0,
                resident_bytes: 2500.0 * 4096.0,
            }
        );
    }
}
